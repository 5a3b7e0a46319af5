//go:build linux

// Package docker is the Docker sandbox provider: a sandbox is a container
// from an image, made and controlled through the Docker Engine API (the
// official Go client, with API version negotiation, so daemons from API 1.41
// on work), never the docker command.
//
// # The container
//
// Any Linux image works: the image needs nothing of ours. The provider's
// static envd binary (the lean envd this binary embeds, or Config.EnvdBinary)
// is bind-mounted read-only at /.sandbox-mcp/envd and is the container's
// entrypoint, behind docker's init (tini) so that orphans are reaped. The
// workspace is /workspace in the container's writable layer: its files
// survive a stop and a restart of the container, and go with the container
// (`docker rm`). The network is off (network mode none) unless the sandbox
// asks for it; memory, CPU, process and open-file limits are the engine's
// (cgroups and ulimits); no-new-privileges is set. Every container carries
// labels under the prefix "sandbox-mcp." (LabelID, LabelOwner, LabelKey,
// ...), and the provider acts only on containers with its labels. It never
// pulls: an image that is not on the engine is an error naming it.
//
// # Reaching envd
//
// envd listens on a unix socket, /.sandbox-mcp/run/envd.sock, in a host
// directory bind-mounted read-write into the container:
// <StateDir>/docker/<id>/run. That directory is the container's to change:
// a process in it could replace the socket with a symbolic link, which the
// server would follow on the host (to another sandbox's socket, or the
// engine's), or with a socket of its own. So the server never dials that
// name. Once envd is ready, the provider hard-links the socket into the
// sandbox's host directory, <StateDir>/docker/<id>/envd.sock, which the
// container cannot see, and Endpoint returns that link. The link is made
// without following symbolic links (link(2) links a symlink itself) and the
// linked inode must be a socket, or it is removed and refused. A socket
// inode in the run directory can only have been bound there by a process of
// that container (hard links across mounts fail, and the container sees no
// other part of the host filesystem), so whatever it leads to is inside the
// same sandbox; and once linked, the container cannot redirect the link.
// When envd starts again (a stopped sandbox resumed, or the container
// restarted behind the provider's back) its new socket replaces the link
// (Endpoint relinks when the inodes differ).
//
// Hard links of a socket owned by another user need CAP_FOWNER under
// fs.protected_hardlinks, and connecting needs write permission on the
// socket, which envd creates as the container's user: this first cut expects
// the server to run as root (the container's root is the host's, as docker
// maps no users by default). Docker Desktop on macOS and Windows runs the
// engine in a VM that shares no unix sockets with the host, and a remote
// DOCKER_HOST shares no directories: both are out of scope for now.
//
// Containers outlive the server: the Manager pauses or kills them at the
// end of a session, and a server that starts again finds them by id.
package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"connectrpc.com/connect"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// DefaultPids is the process limit when neither a SandboxConfig nor
// Config.DefaultLimits sets one, as for the local provider. Memory defaults
// to half the machine's RAM; CPU is not capped; open files (NoFile) are the
// engine's default ulimit, since the engine cannot raise them past its own
// hard limit.
const DefaultPids = 4096

// Labels every sandbox container carries.
const (
	LabelPrefix   = "sandbox-mcp."
	LabelProvider = LabelPrefix + "provider" // "docker"
	LabelID       = LabelPrefix + "id"       // the sandbox id
	LabelOwner    = LabelPrefix + "owner"    // Config.Owner
	LabelKey      = LabelPrefix + "key"      // the workspace key
	LabelNamed    = LabelPrefix + "named"    // "true" for a named workspace
	LabelCreated  = LabelPrefix + "created"  // RFC 3339 creation time
	LabelEnvd     = LabelPrefix + "envd"     // the envd protocol version
)

// Paths inside the container.
const (
	insideDir       = "/.sandbox-mcp"
	insideEnvd      = insideDir + "/envd"
	insideRun       = insideDir + "/run"
	insideSocket    = insideRun + "/envd.sock"
	insideWorkspace = "/workspace"
)

// containerPrefix starts every sandbox container's name: the prefix and
// the sandbox id.
const containerPrefix = "sandbox-mcp-"

// Config configures a Provider. StateDir is required.
type Config struct {
	// StateDir holds the provider's host side: StateDir/docker/ID for each
	// sandbox (its socket directories) and StateDir/docker/bin (the envd
	// binary containers mount). Created if missing.
	StateDir string
	// Image is the default image (DefaultImage when empty); a sandbox's
	// Template overrides it.
	Image string
	// Host is the engine's address ("unix:///var/run/docker.sock",
	// "tcp://host:2376"). Default: DOCKER_HOST, else DefaultHost. Sandboxes
	// need an engine on this machine (see the package comment).
	Host string
	// EnvdBinary is a static Linux envd binary (the lean sandbox-envd or a
	// static sandbox-mcp). Default: the lean envd this binary embeds for the
	// host's architecture, else the running executable when it is static.
	// It is copied into StateDir/docker/bin, which containers mount.
	EnvdBinary string
	// Owner is the value of every container's LabelOwner, which List
	// filters on. Default: derived from the host name and StateDir, so
	// servers sharing a state directory share their sandboxes.
	Owner string
	// User is the user envd (and so every process) runs as in the
	// container, as docker's --user takes it. Default: the image's.
	User string
	// DefaultLimits fills the limits a SandboxConfig leaves at zero; its own
	// zero fields take the package defaults.
	DefaultLimits manage.Limits
	// Logger receives the provider's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Provider is the docker sandbox provider. It is safe for concurrent use;
// operations on one sandbox are serialised, different sandboxes proceed in
// parallel.
type Provider struct {
	log     *slog.Logger
	cli     *client.Client
	dir     string // StateDir/docker
	image   string
	owner   string
	user    string
	envd    string // the installed envd binary, mounted into containers
	limits  manage.Limits
	version string // the engine's API version, negotiated

	mu    sync.Mutex
	locks map[string]*idLock
}

var _ manage.Provider = (*Provider)(nil)

// idLock serialises the operations on one sandbox.
type idLock struct {
	mu    sync.Mutex
	users int
}

// New connects to the engine (negotiating the API version), installs the
// envd binary and returns a provider. It fails when the engine cannot be
// reached, or when there is no static envd binary to mount.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("docker provider: a state directory is required")
	}
	stateDir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("docker provider: state directory %q: %w", cfg.StateDir, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	dir := filepath.Join(stateDir, "docker")
	// A unix socket path has at most 107 bytes.
	if sock := socketPath(dir, "d123456789abcdef"); len(sock) > 107 {
		return nil, fmt.Errorf("docker provider: state directory %s is too long: socket paths under it (%d bytes) exceed the 107-byte limit of unix sockets", stateDir, len(sock))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("docker provider: state directory %s: %w", dir, err)
	}
	host := ResolveHost(cfg.Host)
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker provider: engine %s: %w", host, err)
	}
	ping, err := cli.Ping(ctx)
	if err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("docker provider: cannot reach the docker engine at %s (is dockerd running?): %w", host, err)
	}
	cli.NegotiateAPIVersionPing(ping)
	envdPath, err := installEnvd(filepath.Join(dir, "bin"), cfg.EnvdBinary)
	if err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("docker provider: %w", err)
	}
	owner := cfg.Owner
	if owner == "" {
		hostname, _ := os.Hostname()
		sum := sha256.Sum256([]byte(hostname + "\x00" + stateDir))
		owner = hex.EncodeToString(sum[:8])
	}
	image := cfg.Image
	if image == "" {
		image = DefaultImage
	}
	p := &Provider{
		log: log, cli: cli, dir: dir, image: image, owner: owner, user: cfg.User, envd: envdPath,
		limits: resolveDefaults(cfg.DefaultLimits), version: cli.ClientVersion(), locks: map[string]*idLock{},
	}
	log.Debug("docker provider ready", "host", host, "api_version", p.version, "image", image, "envd", envdPath, "owner", owner)
	return p, nil
}

// ResolveHost returns the engine address New uses for host: host itself,
// else DOCKER_HOST, else DefaultHost.
func ResolveHost(host string) string {
	if host != "" {
		return host
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return DefaultHost
}

// resolveDefaults fills the package defaults into zero fields of lim.
func resolveDefaults(lim manage.Limits) manage.Limits {
	return lim.Or(manage.Limits{MemoryBytes: manage.HalfHostMemory(), Pids: DefaultPids})
}

// Name returns "docker".
func (p *Provider) Name() string { return Name }

// APIVersion returns the Engine API version negotiated with the engine.
func (p *Provider) APIVersion() string { return p.version }

// Owner returns the owner label value of this provider's containers.
func (p *Provider) Owner() string { return p.owner }

// Close releases the engine connection. Containers keep running.
func (p *Provider) Close(context.Context) error { return p.cli.Close() }

// lock serialises operations on sandbox id until the returned func runs.
func (p *Provider) lock(id string) func() {
	p.mu.Lock()
	l := p.locks[id]
	if l == nil {
		l = &idLock{}
		p.locks[id] = l
	}
	l.users++
	p.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		p.mu.Lock()
		if l.users--; l.users == 0 {
			delete(p.locks, id)
		}
		p.mu.Unlock()
	}
}

// newID returns a fresh sandbox id: "d" and 15 hex digits.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "d" + hex.EncodeToString(b[:])[:15]
}

// validID reports whether id could be one of ours.
func validID(id string) bool {
	if len(id) != 16 || id[0] != 'd' {
		return false
	}
	for _, r := range id[1:] {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

func containerName(id string) string { return containerPrefix + id }

// sandboxDir is the host directory of sandbox id.
func (p *Provider) sandboxDir(id string) string { return filepath.Join(p.dir, id) }

func notFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("sandbox %s not found", id))
}

// engineError wraps an error of the engine for sandbox id's operation what:
// a context end as such, anything else as unavailable.
func engineError(what string, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("%s: %w", what, err))
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, fmt.Errorf("%s: %w", what, err))
	case cerrdefs.IsNotFound(err):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("%s: %w", what, err))
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s: docker engine: %w", what, err))
}

// goarch is the architecture of the envd the provider embeds and mounts.
var goarch = runtime.GOARCH

// trimLines returns s's last n lines, trimmed.
func trimLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

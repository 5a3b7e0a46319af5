// Package docker is the Docker sandbox provider: a sandbox is a container
// from an image, made and controlled through the Docker Engine API (the
// official Go client, with API version negotiation, so daemons from API 1.41
// on work), never the docker command. It runs on Linux, macOS and Windows
// hosts (Docker Desktop, colima, OrbStack); the containers are Linux ones.
//
// # The container
//
// Any Linux image works: the image needs nothing of ours. The provider's
// static envd binary (the lean envd this binary embeds for the engine's
// architecture, or Config.EnvdBinary) is bind-mounted read-only at
// /.sandbox-mcp/envd and is the container's entrypoint, behind docker's
// init (tini) so that orphans are reaped. The workspace is /workspace: in
// the container's writable layer for an anonymous workspace (its files
// survive a stop and a restart of the container, and go with the
// container), and in a docker volume for a named one (below). The network
// is off unless the sandbox asks for it (then the engine's bridge);
// memory, CPU, process and open-file limits are the engine's (cgroups and
// ulimits), and a disk cap where the storage driver has one
// (Config.DiskBytes); no-new-privileges is set. Every container carries
// labels under the prefix "sandbox-mcp." (LabelID, LabelOwner, LabelKey,
// ...). It never pulls: an image that is not on the engine is an error
// naming it.
//
// # Ownership
//
// Labels can be copied by anyone who can reach the engine, so they only
// find candidates: the provider records the engine's id of every container
// it creates in the sandbox's host directory (<StateDir>/docker/<id>), and
// acts on a container (Info, Endpoint, Pause, Resume, Kill, List) only when
// its engine id is the recorded one. A container that took a sandbox's
// name and labels after the sandbox was removed is reported as the
// sandbox being gone, never adopted. At start the server calls
// ReapUnowned, which removes the containers of its owner label that no
// store record owns (left by a crash, or copied), the workspace volumes of
// keys the store does not know and stale host directories.
//
// # A damaged store
//
// When the store replaced a damaged file (manage.DamageReporter), its
// records are lost, so ReapUnowned spares every container the provider
// made, every volume and every host directory; the Manager then rebuilds
// the records through Rediscover from the labels of the containers the
// provider made (LabelKey, LabelNamed, LabelGeneration: the engine never
// changes a container's labels, and the engine id check says they are the
// ones Create set). A container without LabelGeneration (made by an older
// version), or an older sandbox of a key that has a newer one, is left in
// place unattributed and logged.
//
// # Named workspaces
//
// A named workspace's /workspace is a docker volume named after the owner
// and the key (labelled with both), so its files survive a server restart
// and the loss of the container (`docker rm -f`): the replacement mounts
// the same volume and Create says so (Sandbox.WorkspaceKept), and the
// notice tells the agent that the workspace's files were kept while
// installed packages, other changes to the container's filesystem and
// processes are gone. Kill (workspace_reset, the paused-TTL reaper)
// removes the volume with the container, as the local provider removes a
// sandbox's files.
//
// # Reaching envd
//
// Two transports (Config.Transport; DefaultTransport picks by GOOS):
//
// The socket (Linux, the default there): envd listens on a unix socket,
// /.sandbox-mcp/run/envd.sock, in a host directory bind-mounted read-write
// into the container: <StateDir>/docker/<id>/run. That directory is the
// container's to change: a process in it could replace the socket with a
// symbolic link, which the server would follow on the host (to another
// sandbox's socket, or the engine's), or with a socket of its own. So the
// server never dials that name. Once envd is ready, the provider
// hard-links the socket into the sandbox's host directory,
// <StateDir>/docker/<id>/envd.sock, which the container cannot see, and
// Endpoint returns that link. The link is made without following symbolic
// links (link(2) links a symlink itself) and the linked inode must be a
// socket, or it is removed and refused. A socket inode in the run
// directory can only have been bound there by a process of that container
// (hard links across mounts fail, and the container sees no other part of
// the host filesystem), so whatever it leads to is inside the same
// sandbox; and once linked, the container cannot redirect the link. When
// envd starts again (a stopped sandbox resumed, or the container restarted
// behind the provider's back) its new socket replaces the link. The socket
// is preferred where it works: only the server's user (and root) can reach
// it, no port is open, and the container's network stays off (mode none).
// Hard links of a socket owned by another user need CAP_FOWNER under
// fs.protected_hardlinks, and connecting needs write permission on the
// socket, which envd creates as the container's user: the socket
// transport expects the server to run as root or the container's user.
//
// TCP (macOS and Windows, where the engine runs in a VM that shares no
// unix sockets with the host; or asked for): envd listens on port 49983 in
// the container, published on the host's 127.0.0.1 only, at a port the
// engine picks, which Endpoint reads from the engine (nothing the
// container writes). A loopback port is open to every local user of the
// host, so envd requires an access token (X-Access-Token) that the
// provider makes per container (32 random bytes), keeps 0600 in the host
// directory and gives envd in its environment (which /proc shows only to
// root), never in its command line. Network mode none publishes no port,
// so a sandbox without network sits on a bridge without NAT and without
// traffic between containers (sandbox-mcp-nonat): no internet and no other
// sandbox, but the host (Docker Desktop's VM) is reachable at the bridge's
// gateway, which its warnings say. When the container stops, its port is
// free for anyone to bind until it starts again: a local user who binds it
// meanwhile would receive one request and its token (which the restarted
// container keeps). The socket transport has no such window.
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
	// LabelGeneration is the workspace generation the sandbox was made
	// as. Containers made before it existed lack it: rebuilding a damaged
	// store leaves them unattributed.
	LabelGeneration = LabelPrefix + "generation"
	LabelCreated    = LabelPrefix + "created" // RFC 3339 creation time
	LabelEnvd       = LabelPrefix + "envd"    // the envd protocol version
	// LabelTransport is the sandbox's Transport ("socket" or "tcp").
	LabelTransport = LabelPrefix + "transport"
	// LabelDisk is "enforced" or "unenforced" when a disk limit was asked
	// for, absent otherwise.
	LabelDisk = LabelPrefix + "disk"
	// LabelNetwork is "true" for a sandbox with network access.
	LabelNetwork = LabelPrefix + "network"
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
	// "npipe:////./pipe/docker_engine"). Default: ResolveHost's choice
	// (DOCKER_HOST, else the platform's usual sockets). The engine must see
	// this machine's StateDir (the envd binary is bind-mounted from it):
	// an engine on this machine, or Docker Desktop, which shares the home
	// directory with its VM.
	Host string
	// Transport is how the server reaches envd (DefaultTransport(GOOS)
	// when empty): see TransportSocket and TransportTCP.
	Transport Transport
	// DiskBytes caps each container's writable layer where the engine's
	// storage driver can (overlay2 on xfs mounted with pquota, btrfs, zfs,
	// devicemapper, windowsfilter); elsewhere the sandbox says it is not
	// enforced (Sandbox.Warnings). 0: no cap.
	DiskBytes int64
	// EnvdBinary is a static Linux envd binary (the lean sandbox-envd or a
	// static sandbox-mcp). Default: the lean envd this binary embeds for the
	// engine's architecture, else the running executable when it is static.
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
	// transport is Config.Transport resolved; disk is Config.DiskBytes and
	// diskOK whether the storage driver can enforce it (diskWhy says why
	// not).
	transport Transport
	disk      int64
	diskOK    bool
	diskWhy   string
	driver    string // the storage driver and its backing filesystem

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
	transport := cfg.Transport
	if transport == "" {
		transport = DefaultTransport(runtime.GOOS)
	}
	if transport == TransportSocket && runtime.GOOS != "linux" {
		return nil, fmt.Errorf("docker provider: the socket transport needs a Linux host (a unix socket does not cross into Docker Desktop's VM); use the tcp transport on %s", runtime.GOOS)
	}
	if sock := socketPath(dir, "d123456789abcdef"); transport == TransportSocket && len(sock) > 107 {
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
	info, err := cli.Info(ctx)
	if err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("docker provider: docker engine at %s: %w", host, err)
	}
	if info.OSType != "" && info.OSType != "linux" {
		_ = cli.Close()
		return nil, fmt.Errorf("docker provider: the docker engine at %s runs %s containers; sandboxes need Linux containers (switch Docker Desktop to Linux containers)", host, info.OSType)
	}
	arch := engineArch(info.Architecture)
	envdPath, err := installEnvd(filepath.Join(dir, "bin"), cfg.EnvdBinary, arch)
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
	def := cfg.DefaultLimits
	if def.MemoryBytes == 0 && info.MemTotal > 0 {
		def.MemoryBytes = info.MemTotal / 2 // the engine's machine (Docker Desktop: its VM)
	}
	p := &Provider{
		log: log, cli: cli, dir: dir, image: image, owner: owner, user: cfg.User, envd: envdPath,
		limits: resolveDefaults(def), version: cli.ClientVersion(), locks: map[string]*idLock{},
		transport: transport, disk: cfg.DiskBytes,
	}
	p.driver, p.diskOK, p.diskWhy = diskSupport(info.Driver, info.DriverStatus)
	if p.disk > 0 && !p.diskOK {
		log.Warn("docker provider: the disk limit cannot be enforced", "reason", p.diskWhy)
	}
	log.Debug("docker provider ready", "host", host, "api_version", p.version, "image", image, "envd", envdPath, "owner", owner, "transport", transport, "storage", p.driver)
	return p, nil
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

// errForeignVolume is why a volume with our name but not our labels is refused.
var errForeignVolume = errors.New("a volume of this name exists and is not this server's (its owner label differs); remove or rename it")

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

// engineArch maps the engine's architecture ("x86_64", "aarch64") to
// GOARCH's names; "" gives this host's.
func engineArch(a string) string {
	switch a {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	case "":
		return runtime.GOARCH
	}
	return a
}

// Transport returns the transport of the sandboxes this provider creates.
func (p *Provider) Transport() Transport { return p.transport }

// DiskLimit reports the disk cap per sandbox, whether the storage driver
// enforces it, and why not when it does not.
func (p *Provider) DiskLimit() (bytes int64, enforced bool, why string) {
	return p.disk, p.diskOK, p.diskWhy
}

// trimLines returns s's last n lines, trimmed.
func trimLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

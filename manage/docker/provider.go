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
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"

	envd "github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
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
	if lim.MemoryBytes == 0 {
		var si unix.Sysinfo_t
		if unix.Sysinfo(&si) == nil {
			page := int64(os.Getpagesize())
			lim.MemoryBytes = int64(si.Totalram) * int64(si.Unit) / 2 / page * page
		}
	}
	if lim.Pids == 0 {
		lim.Pids = DefaultPids
	}
	return lim
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

// Create makes and starts a container for cfg and returns once its envd
// listens and the socket is linked.
func (p *Provider) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
	image := cfg.Template
	if image == "" {
		image = p.image
	}
	if _, err := p.cli.ImageInspect(ctx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return manage.Sandbox{}, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"docker image %q is not on the docker engine, and the docker provider never pulls: run `docker pull %s` (or build or import it) first", image, image))
		}
		return manage.Sandbox{}, engineError("inspect image "+image, err)
	}
	if _, err := os.Stat(p.envd); err != nil {
		return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("envd binary: %w", err))
	}
	id := newID()
	unlock := p.lock(id)
	defer unlock()
	dir := p.sandboxDir(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	// The container's user must be able to create the socket, whoever it
	// is; the sandbox directory above keeps host users out.
	if err := makeRunDir(dir); err != nil {
		_ = os.RemoveAll(dir)
		return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	created := time.Now().UTC().Truncate(time.Second)
	cc, hc := p.containerConfig(id, image, cfg, created)
	ok := false
	defer func() {
		if !ok {
			// Detached: a cancelled create still removes what it made.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = p.cli.ContainerRemove(rctx, containerName(id), container.RemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
			_ = os.RemoveAll(dir)
		}
	}()
	if _, err := p.cli.ContainerCreate(ctx, cc, hc, nil, nil, containerName(id)); err != nil {
		return manage.Sandbox{}, engineError("create sandbox container from image "+image, err)
	}
	if err := p.start(ctx, id); err != nil {
		return manage.Sandbox{}, err
	}
	ok = true
	sb := manage.Sandbox{
		ID: id, Provider: Name, State: manage.StateRunning, Detail: "running", CreatedAt: created,
		Isolation: Isolation, Workdir: insideWorkspace, EnvdVersion: envd.Version,
	}
	p.log.Debug("docker sandbox created", "id", id, "image", image, "key", cfg.Key)
	return sb, nil
}

// containerConfig is the container of sandbox id.
func (p *Provider) containerConfig(id, image string, cfg manage.SandboxConfig, created time.Time) (*container.Config, *container.HostConfig) {
	lim := cfg.Limits
	if lim.MemoryBytes == 0 {
		lim.MemoryBytes = p.limits.MemoryBytes
	}
	if lim.CPUs == 0 {
		lim.CPUs = p.limits.CPUs
	}
	if lim.Pids == 0 {
		lim.Pids = p.limits.Pids
	}
	if lim.NoFile == 0 {
		lim.NoFile = p.limits.NoFile
	}
	entry := []string{insideEnvd, "envd", "--listen", "unix:" + insideSocket, "--root", insideWorkspace, "--ready-fd", "1"}
	env := map[string]string{"LANG": "C.UTF-8", "TMPDIR": "/tmp"}
	for k, v := range cfg.Env {
		env[k] = v
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		entry = append(entry, "--env", k+"="+env[k])
	}
	cc := &container.Config{
		Image:        image,
		User:         p.user,
		Entrypoint:   entry,
		Cmd:          []string{},
		WorkingDir:   insideWorkspace,
		Env:          []string{"HOME=" + insideWorkspace},
		AttachStdout: true,
		AttachStderr: true,
		Labels: map[string]string{
			LabelProvider: Name,
			LabelID:       id,
			LabelOwner:    p.owner,
			LabelKey:      cfg.Key,
			LabelNamed:    strconv.FormatBool(cfg.Named),
			LabelCreated:  created.Format(time.RFC3339),
			LabelEnvd:     envd.Version,
		},
	}
	network := container.NetworkMode("none")
	if cfg.Network {
		network = "bridge"
	}
	init := true
	hc := &container.HostConfig{
		NetworkMode: network,
		Init:        &init,
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: p.envd, Target: insideEnvd, ReadOnly: true},
			{Type: mount.TypeBind, Source: filepath.Join(p.sandboxDir(id), "run"), Target: insideRun},
		},
		SecurityOpt: []string{"no-new-privileges"},
		LogConfig:   container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "2"}},
		Resources: container.Resources{
			Memory:     lim.MemoryBytes,
			MemorySwap: lim.MemoryBytes, // no swap beyond the memory limit
			NanoCPUs:   int64(lim.CPUs * 1e9),
			PidsLimit:  &lim.Pids,
		},
	}
	if lim.NoFile > 0 {
		hc.Ulimits = []*container.Ulimit{{Name: "nofile", Soft: int64(lim.NoFile), Hard: int64(lim.NoFile)}}
	}
	return cc, hc
}

// inspect returns sandbox id's container, or a not-found error when there is
// none or it is not a sandbox-mcp container of that id.
func (p *Provider) inspect(ctx context.Context, id string) (container.InspectResponse, error) {
	if !validID(id) {
		return container.InspectResponse{}, notFound(id)
	}
	ci, err := p.cli.ContainerInspect(ctx, containerName(id))
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return ci, notFound(id)
		}
		return ci, engineError("inspect sandbox "+id, err)
	}
	if ci.Config == nil || ci.Config.Labels[LabelID] != id || ci.State == nil {
		return ci, notFound(id)
	}
	return ci, nil
}

// Info reports the sandbox's state from the container's: running, paused,
// exited or created (stopped: its files are kept), or gone when there is no
// such container (removed, `docker rm -f`) or it is dead or being removed.
func (p *Provider) Info(ctx context.Context, id string) (manage.Sandbox, error) {
	ci, err := p.inspect(ctx, id)
	if err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return manage.Sandbox{ID: id, Provider: Name, State: manage.StateGone, Detail: "not found"}, nil
		}
		return manage.Sandbox{}, err
	}
	return p.describe(id, ci.Config.Labels, ci.State), nil
}

// describe turns a container's labels and state into a Sandbox.
func (p *Provider) describe(id string, labels map[string]string, st *container.State) manage.Sandbox {
	sb := manage.Sandbox{
		ID: id, Provider: Name, Isolation: Isolation, Workdir: insideWorkspace, EnvdVersion: labels[LabelEnvd],
	}
	sb.CreatedAt, _ = time.Parse(time.RFC3339, labels[LabelCreated])
	sb.State, sb.Detail = mapState(st)
	if sb.State == manage.StateStopped || sb.State == manage.StateGone {
		if t, err := time.Parse(time.RFC3339Nano, st.FinishedAt); err == nil && !t.IsZero() && t.Year() > 1 {
			sb.EndedAt = t
		}
	}
	return sb
}

// mapState maps a container's state to a sandbox state and detail.
func mapState(st *container.State) (manage.State, string) {
	switch {
	case st.Paused:
		return manage.StatePaused, "paused"
	case st.Running, st.Restarting:
		return manage.StateRunning, "running"
	case st.Dead, st.Status == container.StateDead:
		return manage.StateGone, "container is dead"
	case st.Status == container.StateRemoving:
		return manage.StateGone, "container is being removed"
	case st.Status == container.StateCreated:
		return manage.StateStopped, "container created, never started"
	}
	detail := fmt.Sprintf("container exited with code %d", st.ExitCode)
	if st.OOMKilled {
		detail += " (killed: out of memory)"
	}
	if st.Error != "" {
		detail += ": " + st.Error
	}
	return manage.StateStopped, detail
}

// Endpoint returns the host-only link to the sandbox's envd socket (see the
// package comment), relinking it first when envd's socket changed since.
func (p *Provider) Endpoint(ctx context.Context, id string) (manage.Endpoint, error) {
	if !validID(id) {
		return manage.Endpoint{}, notFound(id)
	}
	if err := ctx.Err(); err != nil {
		return manage.Endpoint{}, engineError("sandbox "+id, err)
	}
	dir := p.sandboxDir(id)
	if _, err := os.Stat(dir); err != nil {
		return manage.Endpoint{}, notFound(id)
	}
	unlock := p.lock(id)
	defer unlock()
	if err := refreshLink(dir); err != nil {
		if _, lerr := os.Lstat(socketPath(p.dir, id)); lerr != nil {
			return manage.Endpoint{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: %w", id, err))
		}
		// The link to envd's socket from before stays valid.
		p.log.Warn("docker sandbox: the socket in its run directory is unusable; keeping the link made before", "id", id, "error", err)
	}
	return manage.Endpoint{URL: "unix:" + socketPath(p.dir, id), EnvdVersion: envd.Version}, nil
}

// Pause freezes the container (docker pause). Pausing a paused or stopped
// one is a no-op.
func (p *Provider) Pause(ctx context.Context, id string) error {
	unlock := p.lock(id)
	defer unlock()
	ci, err := p.inspect(ctx, id)
	if err != nil {
		return err
	}
	if ci.State.Paused || !ci.State.Running {
		return nil
	}
	if err := p.cli.ContainerPause(ctx, containerName(id)); err != nil {
		return engineError("pause sandbox "+id, err)
	}
	return nil
}

// Resume unpauses a paused container, or starts a stopped one (its files
// kept, its processes from before gone) and waits for its envd. Resuming a
// running one is a no-op.
func (p *Provider) Resume(ctx context.Context, id string) error {
	unlock := p.lock(id)
	defer unlock()
	ci, err := p.inspect(ctx, id)
	if err != nil {
		return err
	}
	switch state, detail := mapState(ci.State); state {
	case manage.StateRunning:
		return nil
	case manage.StatePaused:
		if err := p.cli.ContainerUnpause(ctx, containerName(id)); err != nil {
			return engineError("resume sandbox "+id, err)
		}
		return nil
	case manage.StateStopped:
		if err := makeRunDir(p.sandboxDir(id)); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
		}
		return p.start(ctx, id)
	default:
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("sandbox %s: %s", id, detail))
	}
}

// Kill removes the container with its anonymous volumes, and the sandbox's
// host directory. Killing a gone one is a no-op.
func (p *Provider) Kill(ctx context.Context, id string) error {
	if !validID(id) {
		return nil
	}
	unlock := p.lock(id)
	defer unlock()
	if _, err := p.inspect(ctx, id); err != nil {
		if connect.CodeOf(err) != connect.CodeNotFound {
			return err
		}
	} else if err := p.cli.ContainerRemove(ctx, containerName(id), container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return engineError("kill sandbox "+id, err)
	}
	if err := os.RemoveAll(p.sandboxDir(id)); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("kill sandbox %s: %w", id, err))
	}
	return nil
}

// List returns the sandboxes of this provider's owner: containers with its
// owner label.
func (p *Provider) List(ctx context.Context) ([]manage.Sandbox, error) {
	cs, err := p.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelOwner+"="+p.owner), filters.Arg("label", LabelProvider+"="+Name)),
	})
	if err != nil {
		return nil, engineError("list sandboxes", err)
	}
	out := make([]manage.Sandbox, 0, len(cs))
	for _, c := range cs {
		id := c.Labels[LabelID]
		if !validID(id) {
			continue
		}
		st := &container.State{Status: c.State}
		switch c.State {
		case container.StateRunning:
			st.Running = true
		case container.StatePaused:
			st.Running, st.Paused = true, true
		case container.StateRestarting:
			st.Restarting = true
		case container.StateDead:
			st.Dead = true
		}
		sb := p.describe(id, c.Labels, st)
		if sb.State == manage.StateStopped {
			sb.Detail = c.Status
		}
		out = append(out, sb)
	}
	return out, nil
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

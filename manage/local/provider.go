//go:build linux

// Package local is the embedded sandbox provider: a sandbox is a directory
// under the state directory plus one envd daemon (the lean sandbox-envd this
// binary embeds, else `sandbox-mcp envd`) reached over a unix socket,
// isolated with bubblewrap where it works.
//
// A sandbox with id ID lives in <StateDir>/sandboxes/ID/:
//
//	workspace/   the workspace (/workspace inside, envd's --root); with a
//	             disk image, this and tmp and run are symlinks into volume/
//	disk.img, volume/
//	             the sandbox's disk quota: an ext4 image, mounted at volume/
//	             while the sandbox runs (disk.go)
//	hostid       its own host uid and gid, for a root server (hostids.go)
//	tmp/         its private /tmp
//	run/         /.sandbox-mcp/run inside, writable there; nothing the
//	             server reads (envd's socket used to be here, where the
//	             sandbox could replace it)
//	ctl/         envd.sock, the daemon's socket: made by the server, passed
//	             to envd as a descriptor, out of every sandbox's sight
//	             (socket.go)
//	sandbox.json id, creation time and configuration, so the sandbox is
//	             found again after a restart
//	owner.lock, op.lock, daemon.json
//	             who runs the sandbox's daemon, see below and ownership.go
//	daemon.log   a detached daemon's output (detach.go)
//
// The sandbox directory and everything in it but workspace, tmp and run
// belong to the server; those three belong to the sandbox's host user.
// <StateDir>/bin holds the embedded lean envd, written there once, and a
// copy of an envd binary that user cannot reach where it is (see
// binary.go).
//
// Under bwrap the daemon runs in new user, pid, ipc, uts, mount, cgroup and
// (unless the sandbox has network) network namespaces as uid 1000, sees the
// host's system directories read-only, its workspace, its /tmp and nothing
// else of the host, under a seccomp filter modelled on Docker's default
// profile (seccomp.go). When the server runs as root, bwrap itself runs as
// an unprivileged host user — by default one of its own per sandbox, from
// Config.SandboxIDs — so that uid 1000 inside is not root's uid outside:
// otherwise the sandbox would own every root-owned file it can see
// (/etc/shadow among them). Without bwrap
// (isolation none) the daemon is a plain child process confined only by
// envd's --confine, and every Sandbox says so in its Warnings.
//
// Each sandbox gets a cgroup (v1 or v2) with memory, cpu and pids limits
// where the host allows, which also freezes it for Pause, and rlimits
// (RLIMIT_NOFILE, RLIMIT_NPROC). The daemon of a sandbox made for an
// anonymous workspace dies with the server (bwrap --die-with-parent, or the
// parent-death signal): after a restart such a sandbox is stopped, and
// Resume starts a new daemon on the same files. A named workspace's sandbox
// may serve several servers at once (two clients on one --workspace), so its
// daemon is detached (detach.go): it runs under a keeper process of its own
// session and outlives the server that started it, running or paused, until
// it is killed; the Manager pauses it when the last server holding it lets go.
//
// The parent-death signal is delivered when the OS thread that started the
// daemon exits, not the process; Go only ends a thread when a goroutine
// exits while locked to it, which this package never does. A server that
// does so elsewhere would see sandboxes die with that thread.
//
// Several Providers, in one process or in several sandbox-mcp processes, may
// share a state directory. Each sandbox belongs to the Provider that runs
// its daemon, which holds a lock in the sandbox directory for as long as the
// daemon runs (see ownership.go); a detached daemon's keeper holds it too,
// so the lock stays held after that Provider's process is gone. Another
// Provider sees such a sandbox running or paused, can reach its envd (the
// unix socket is open to every process of the user), and never restarts or
// reaps it. It can pause it (freeze its recorded cgroup, or SIGSTOP its
// process tree: the Manager does so only when no other server holds the
// workspace), resume it (thaw, or SIGCONT) and kill it (an explicit request
// to destroy it). A sandbox whose lock is free runs nothing (its daemon died):
// it is stopped, and the first Provider to Resume it becomes its owner.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Name is the provider's name.
const Name = "local"

// Isolation values (Config.Isolation, Provider.Isolation, Sandbox.Isolation).
const (
	IsolationAuto  = "auto"
	IsolationBwrap = "bwrap"
	IsolationNone  = "none"
)

// Built-in defaults for limits a SandboxConfig and Config.DefaultLimits leave
// at zero. Memory defaults to half the machine's RAM; CPU is not capped.
const (
	DefaultPids   = 4096
	DefaultNoFile = 65536
)

// defaultHostID is the host user and group bwrap runs as when the server is
// root: nobody and nogroup.
const defaultHostID = 65534

// noIsolationWarning is on every Sandbox of a provider without isolation.
var noIsolationWarning = fmt.Sprintf("This sandbox is NOT isolated from the host (isolation none: bubblewrap is "+
	"not in use): its commands run as ordinary processes of the server's user (%s) and can read, change and "+
	"delete anything that user can, see the host's processes and use its network. Only envd's file API is "+
	"confined to the workspace.", serverUser())

// noSeccompWarning is on every bwrap Sandbox where the package has no
// seccomp filter for the architecture.
var noSeccompWarning = fmt.Sprintf("This sandbox has no seccomp filter (none is built for %s): its processes can make "+
	"every system call a user namespace allows, including mount and nested user namespaces.", runtime.GOARCH)

// serverUser names the user the server runs as, for warnings.
func serverUser() string {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Sprintf("uid %d", uid)
	}
	return "root"
}

// Config configures a Provider. StateDir is required.
type Config struct {
	// StateDir holds the sandboxes (StateDir/sandboxes/ID). Created if
	// missing; it must be writable.
	StateDir string
	// EnvdBinary is the envd binary, run as `EnvdBinary envd …`: a
	// sandbox-mcp binary or the lean sandbox-envd. Default: the lean envd
	// this binary embeds for the host's architecture (package envdbin,
	// written into StateDir/bin), or the running executable when it
	// carries none (built without `make build`).
	EnvdBinary string
	// Isolation is auto (default), bwrap or none. auto uses bwrap when a
	// probe run of it works and none otherwise; bwrap makes New fail when
	// it does not work.
	Isolation string
	// BwrapPath is the bwrap executable. Default "bwrap", looked up in PATH.
	BwrapPath string
	// HostUID and HostGID are the host user and group bwrap runs as when the
	// server runs as root, so uid 1000 inside maps to them rather than to
	// root. Both 0 (the default) means one id per sandbox from SandboxIDs;
	// one of them 0 means 65534 (nobody) for it, and a single id set here is
	// shared by every sandbox (and so is per-user accounting such as
	// RLIMIT_NPROC); -1 keeps root. They need search
	// permission on every parent of the state directory (the state and
	// sandboxes directories themselves are made 0711); when they lack it,
	// sandboxes run as root's uid with a warning. An EnvdBinary they cannot
	// reach is copied into StateDir/bin.
	HostUID, HostGID int
	// Disk is each bwrap sandbox's disk quota in bytes, for its workspace,
	// /tmp and run logs together, enforced with a loop-mounted ext4 image
	// when the server runs as root (see disk.go). 0 means DefaultDisk (10
	// GiB); negative means none.
	Disk int64
	// SandboxIDs is the range of host ids a root server gives its sandboxes,
	// one uid (and the same gid) each, kept while the sandbox exists (see
	// hostids.go). Zero: DefaultSandboxIDs. Unused when HostUID or HostGID
	// is set, and by a server that is not root, whose sandboxes all map to
	// its own uid (bwrap maps one id; it does not use newuidmap).
	SandboxIDs IDRange
	// Cgroups selects the cgroup hierarchy: auto (default: v1 controllers
	// where mounted, else v2), v1, v2 or off. An explicit version that is
	// not available is an error.
	Cgroups string
	// CgroupName is the parent cgroup of the sandboxes in each hierarchy.
	// Default "sandbox-mcp".
	CgroupName string
	// DefaultLimits fills the limits a SandboxConfig leaves at zero; its
	// own zero fields take the package defaults.
	DefaultLimits manage.Limits
	// Logger receives the provider's logs. Nil means slog.Default().
	Logger *slog.Logger

	// perSandboxIDs is set by withDefaults when sandboxes get their own host
	// ids; HostUID and HostGID then hold SandboxIDs.First, the id the probe
	// runs as.
	perSandboxIDs bool

	// embedded is the lean envd that EnvdBinary names when it defaulted to
	// one: envdbin.Lookup(runtime.GOARCH), or what a test put here.
	embedded *envdbin.Envd
}

// Capabilities is what works on this machine for the local provider, as
// Probe finds it.
type Capabilities struct {
	// BwrapPath is the bwrap executable found ("" when none).
	BwrapPath string
	// BwrapVersion is `bwrap --version` ("bubblewrap 0.8.0").
	BwrapVersion string
	// BwrapUsable is true when a probe sandbox with every namespace a
	// sandbox uses ran /bin/true.
	BwrapUsable bool
	// BwrapError is why bwrap is not usable (its stderr, quoted).
	BwrapError string
	// UserNamespaces reports whether the kernel allows user namespaces.
	UserNamespaces bool
	// SandboxUID and SandboxGID are the host ids that uid and gid 1000 in a
	// bwrap sandbox map to; with SandboxIDs, the first of the range (the id
	// the probe ran as).
	SandboxUID, SandboxGID int
	// SandboxIDs, when its Count is not 0, is the range each sandbox gets its
	// own host uid and gid from.
	SandboxIDs IDRange
	// DropError, for a server running as root, is why bwrap could not run
	// as Config.HostUID, so sandboxes map to root's uid instead; DropFix
	// says what would let it (when known).
	DropError, DropFix string
	// EnvdBinary is the binary bwrap sandboxes run: Config.EnvdBinary, or
	// its copy in StateDir/bin when the sandbox user cannot reach it (Probe
	// names the copy without installing it).
	EnvdBinary string
	// CgroupVersion is 1 or 2, or 0 when sandboxes get no cgroup.
	CgroupVersion int
	// CgroupError is why sandboxes get no cgroup.
	CgroupError string
	// Freezer reports whether Pause freezes a cgroup (otherwise it stops
	// the processes with SIGSTOP).
	Freezer bool
	// MemoryLimit, PidsLimit and CPULimit report which cgroup limits apply.
	MemoryLimit, PidsLimit, CPULimit bool
}

// Provider is the local sandbox provider. It is safe for concurrent use;
// operations on one sandbox are serialised (across Providers and processes
// too, by the sandbox's op.lock), different sandboxes proceed in parallel.
type Provider struct {
	log          *slog.Logger
	stateDir     string
	sandboxesDir string
	envd         *envdExecutable
	bwrapPath    string
	isolation    string
	cred         *syscall.Credential // bwrap's user; nil: the server's own
	hostIDs      *hostIDs            // per-sandbox host ids; nil: cred for all
	disk         *diskQuota          // nil: no disk quotas, diskWhy says why
	diskWhy      string
	prlimit      bool   // set rlimits with prlimit(2), not through sh
	maxNoFile    uint64 // highest NOFILE and NPROC the server may
	maxNProc     uint64 // give (its own hard limits), 0: no cap
	owner        [2]int // uid, gid of new workspaces; -1: leave
	sysMounts    []string
	cgroups      *cgroups
	caps         Capabilities
	limits       manage.Limits // resolved defaults
	// warnings are on every Sandbox: limits and protections this machine
	// cannot give (noIsolationWarning is added by describe).
	warnings []string

	bg sync.WaitGroup // background removals

	// startHook, when set (by tests only), is called at each startStage of
	// a daemon's start, with the start's context; nil in production.
	startHook func(ctx context.Context, stage startStage, id string)

	mu      sync.Mutex
	entries map[string]*entry
	closed  bool
}

var _ manage.Provider = (*Provider)(nil)

// New checks the state directory, probes bwrap and cgroups, and returns a
// provider. It fails when StateDir is not writable or when Isolation is bwrap
// and bwrap does not work (quoting bwrap's error). Other Providers may use
// the same state directory at the same time.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	p := &Provider{
		log:          log,
		stateDir:     cfg.StateDir,
		sandboxesDir: filepath.Join(cfg.StateDir, "sandboxes"),
		envd:         &envdExecutable{source: cfg.EnvdBinary, current: cfg.EnvdBinary},
		owner:        [2]int{-1, -1},
		entries:      map[string]*entry{},
	}
	if err := p.prepareStateDir(dropsPrivileges(cfg)); err != nil {
		return nil, err
	}
	if cfg.embedded != nil {
		if err := installEmbeddedEnvd(cfg); err != nil {
			return nil, fmt.Errorf("local provider: %w", err)
		}
		p.envd.embedded = cfg.embedded
		log.Debug("sandboxes run the lean envd this binary embeds", "envd", cfg.EnvdBinary)
	} else {
		log.Debug("sandboxes run this envd binary", "envd", cfg.EnvdBinary)
	}
	closeInheritedFDsOnExec()
	if _, err := os.Stat(cfg.EnvdBinary); err != nil {
		return nil, fmt.Errorf("local provider: envd binary: %w", err)
	}
	r := reach{envd: cfg.EnvdBinary}
	if cfg.Isolation != IsolationNone {
		if r, err = checkReach(cfg, true); err != nil {
			return nil, fmt.Errorf("local provider: %w", err)
		}
	}
	if r.envd != cfg.EnvdBinary {
		p.envd.binDir, p.envd.current = filepath.Dir(r.envd), r.envd
		log.Debug("the sandbox user cannot reach the envd binary; sandboxes run a copy in the state directory",
			"binary", cfg.EnvdBinary, "copy", r.envd, "reason", r.envdErr)
	}

	caps, cg, cred := probe(ctx, cfg, p.sandboxesDir, r)
	if caps.CgroupError != "" && (cfg.Cgroups == CgroupsV1 || cfg.Cgroups == CgroupsV2) {
		return nil, fmt.Errorf("local provider: cgroups %s requested but not available: %s", cfg.Cgroups, caps.CgroupError)
	}
	p.caps, p.cgroups, p.cred, p.bwrapPath = caps, cg, cred, caps.BwrapPath
	switch {
	case cfg.Isolation == IsolationNone:
		p.isolation = IsolationNone
	case caps.BwrapUsable:
		p.isolation = IsolationBwrap
	case cfg.Isolation == IsolationBwrap:
		return nil, fmt.Errorf("local provider: isolation bwrap requested but bwrap does not work here: %s", caps.BwrapError)
	default:
		p.isolation = IsolationNone
		log.Warn("bubblewrap does not work here; sandboxes run WITHOUT isolation", "bwrap", cfg.BwrapPath, "error", caps.BwrapError)
	}
	if p.isolation == IsolationNone {
		log.Warn("local sandboxes are not isolated from the host: commands run as the server's user with its privileges")
		p.cred = nil
		p.caps.SandboxUID, p.caps.SandboxGID = os.Geteuid(), os.Getegid()
	}
	if p.isolation == IsolationBwrap {
		p.sysMounts = systemMountArgs()
		if cred != nil {
			p.owner = [2]int{int(cred.Uid), int(cred.Gid)}
			if cfg.perSandboxIDs {
				if p.hostIDs, err = newHostIDs(p.stateDir, p.sandboxesDir, cfg.SandboxIDs); err != nil {
					return nil, fmt.Errorf("local provider: %w", err)
				}
				p.caps.SandboxIDs = cfg.SandboxIDs
			}
		} else if caps.DropError != "" {
			log.Warn("bwrap cannot run as the unprivileged host user; sandbox uid 1000 maps to the server's uid (root)",
				"host_uid", cfg.HostUID, "error", caps.DropError, "fix", caps.DropFix)
		}
	}
	if p.isolation == IsolationBwrap {
		switch {
		case cfg.Disk < 0:
			p.diskWhy = "disk quotas are turned off"
		default:
			size := cfg.Disk
			if size == 0 {
				size = DefaultDisk
			}
			p.disk, p.diskWhy = newDiskQuota(size, p.stateDir)
			if p.disk == nil {
				log.Warn("sandboxes get no disk quota: their disk use is bounded only by the host filesystem", "reason", p.diskWhy)
			}
		}
	}
	if p.isolation == IsolationBwrap && seccompArch == 0 {
		p.warnings = append(p.warnings, noSeccompWarning)
		log.Warn(noSeccompWarning)
	}
	if caps.CgroupError != "" {
		log.Warn("sandboxes get no cgroup: no memory, cpu or pids limits; pause uses SIGSTOP", "error", caps.CgroupError)
	}
	p.limits = resolveDefaults(cfg.DefaultLimits)
	// prlimit(2) on the sandbox's first process needs CAP_SYS_RESOURCE
	// unless that process has the server's uid; otherwise, and always
	// without bwrap (see startDaemon), sh sets the limits before exec.
	canRaise := hasCapability(unix.CAP_SYS_RESOURCE)
	p.prlimit = p.isolation == IsolationBwrap && (p.cred == nil || canRaise)
	if !canRaise {
		var lim unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
			p.maxNoFile = lim.Max
		}
		if unix.Getrlimit(unix.RLIMIT_NPROC, &lim) == nil {
			p.maxNProc = lim.Max
		}
	}
	if err := p.reapLeftovers(ctx); err != nil {
		return nil, err
	}
	p.removeTrash()
	log.Debug("local provider ready", "state_dir", p.stateDir, "isolation", p.isolation, "bwrap", caps.BwrapVersion,
		"sandbox_uid", caps.SandboxUID, "cgroup_version", caps.CgroupVersion, "freezer", caps.Freezer)
	return p, nil
}

// installEmbeddedEnvd writes the embedded envd to cfg.EnvdBinary, in
// StateDir/bin, unless it is there already, and removes old copies and
// embedded envds nobody used for a day.
func installEmbeddedEnvd(cfg Config) error {
	binDir := filepath.Dir(cfg.EnvdBinary)
	path, err := installEmbedded(binDir, cfg.embedded)
	if err != nil {
		return fmt.Errorf("install the embedded envd in %s: %w", binDir, err)
	}
	// Searchable, not listable, whoever made it.
	_ = os.Chmod(binDir, 0o711)
	removeOldCopies(binDir, path)
	return nil
}

// dropsPrivileges reports whether bwrap is to run as an unprivileged host
// user (a root server with HostUID and HostGID not -1).
func dropsPrivileges(cfg Config) bool {
	return os.Geteuid() == 0 && cfg.HostUID >= 0 && cfg.HostGID >= 0
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.StateDir == "" {
		return cfg, errors.New("local provider: a state directory is required")
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return cfg, fmt.Errorf("local provider: state directory %q: %w", cfg.StateDir, err)
	}
	cfg.StateDir = abs
	if cfg.EnvdBinary == "" && cfg.embedded == nil && runtime.GOOS == "linux" {
		cfg.embedded = envdbin.Lookup(runtime.GOARCH)
	}
	switch {
	case cfg.EnvdBinary != "":
		cfg.embedded = nil
	case cfg.embedded != nil:
		cfg.EnvdBinary = embeddedPath(filepath.Join(cfg.StateDir, "bin"), cfg.embedded)
	default:
		if cfg.EnvdBinary, err = os.Executable(); err != nil {
			return cfg, fmt.Errorf("local provider: locate envd binary: %w", err)
		}
	}
	if cfg.EnvdBinary, err = filepath.Abs(cfg.EnvdBinary); err != nil {
		return cfg, fmt.Errorf("local provider: envd binary: %w", err)
	}
	switch cfg.Isolation {
	case "":
		cfg.Isolation = IsolationAuto
	case IsolationAuto, IsolationBwrap, IsolationNone:
	default:
		return cfg, fmt.Errorf("local provider: isolation %q: want auto, bwrap or none", cfg.Isolation)
	}
	switch cfg.Cgroups {
	case "":
		cfg.Cgroups = CgroupsAuto
	case CgroupsAuto, CgroupsV1, CgroupsV2, CgroupsOff:
	default:
		return cfg, fmt.Errorf("local provider: cgroups %q: want auto, v1, v2 or off", cfg.Cgroups)
	}
	if cfg.BwrapPath == "" {
		cfg.BwrapPath = "bwrap"
	}
	if cfg.CgroupName == "" {
		cfg.CgroupName = "sandbox-mcp"
	}
	if !validCgroupName(cfg.CgroupName) {
		return cfg, fmt.Errorf("local provider: cgroup name %q: want letters, digits, '-', '_' and '.'", cfg.CgroupName)
	}
	if cfg.HostUID == 0 && cfg.HostGID == 0 {
		if cfg.SandboxIDs == (IDRange{}) {
			cfg.SandboxIDs = DefaultSandboxIDs
		}
		if err := cfg.SandboxIDs.check(); err != nil {
			return cfg, fmt.Errorf("local provider: sandbox ids: %w", err)
		}
		cfg.perSandboxIDs = true
		cfg.HostUID, cfg.HostGID = cfg.SandboxIDs.First, cfg.SandboxIDs.First
	}
	if cfg.HostUID == 0 {
		cfg.HostUID = defaultHostID
	}
	if cfg.HostGID == 0 {
		cfg.HostGID = defaultHostID
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// A unix socket path has at most 107 bytes.
	if sock := socketPath(filepath.Join(cfg.StateDir, "sandboxes", "l123456789abcdef")); len(sock) > 107 {
		return cfg, fmt.Errorf("local provider: state directory %s is too long: socket paths under it (%d bytes) exceed the 107-byte limit of unix sockets", cfg.StateDir, len(sock))
	}
	return cfg, nil
}

func validCgroupName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' && r != '_' && r != '.' {
			return false
		}
	}
	return true
}

// resolveDefaults fills the package defaults into zero fields of lim.
func resolveDefaults(lim manage.Limits) manage.Limits {
	return lim.Or(manage.Limits{MemoryBytes: manage.HalfHostMemory(), Pids: DefaultPids, NoFile: DefaultNoFile})
}

// Name returns "local".
func (p *Provider) Name() string { return Name }

// Isolation returns the isolation sandboxes get: "bwrap" or "none".
func (p *Provider) Isolation() string { return p.isolation }

// Capabilities returns what New found on this machine.
func (p *Provider) Capabilities() Capabilities { return p.caps }

// Close kills every daemon this provider started that dies with it (those
// of sandboxes not made for a named workspace) and waits for them (until ctx
// ends), keeping their directories: the sandboxes become stopped, as after
// a server restart, and another Provider may resume them. Detached daemons
// (named workspaces', which other servers may be using) are left as they
// are, running or paused. Later calls that would start a daemon fail.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var daemons []*daemon
	for _, e := range p.entries {
		if e.d != nil && !e.d.detached {
			daemons = append(daemons, e.d)
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, d := range daemons {
		if err := p.stopDaemon(ctx, d, closedReason); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := awaitRelease(ctx, d); err != nil {
			errs = append(errs, ctxError("close local provider", err))
		}
	}
	done := make(chan struct{})
	go func() { p.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctxError("close local provider", ctx.Err()))
	}
	return errors.Join(errs...)
}

// closedReason is the detail of a sandbox whose daemon Close stopped.
const closedReason = "the sandbox-mcp process that ran it closed"

func (p *Provider) checkOpen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed()
	}
	return nil
}

func errClosed() error {
	return connect.NewError(connect.CodeFailedPrecondition, errors.New("the local provider is closed"))
}

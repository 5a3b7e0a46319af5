package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/cmdline"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2b"
	"github.com/sandbox-mcp/sandbox-mcp/manage/holders"
	"github.com/sandbox-mcp/sandbox-mcp/manage/redisstore"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// defaultStateDir is /var/lib/sandbox-mcp for root (whose home is not
// reachable by the unprivileged user sandboxes run as), else
// $XDG_STATE_HOME/sandbox-mcp, else ~/.local/state/sandbox-mcp.
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/sandbox-mcp"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sandbox-mcp")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "sandbox-mcp")
	}
	return filepath.Join(os.TempDir(), "sandbox-mcp-state")
}

// serveOptions are the flags that shape sandboxes and tools, shared by
// serve, call, tools and doctor: provider, limits, workspace, toolsets.
type serveOptions struct {
	provider       string
	isolation      string
	network        networkFlag
	defaultTimeout time.Duration
	maxTimeout     time.Duration
	outputLimit    byteSize
	maxPutBytes    byteSize
	maxReadBytes   byteSize
	autoRecreate   bool
	idlePause      time.Duration
	pausedTTL      time.Duration
	// maxSandboxesPerPrincipal is --max-sandboxes-per-principal.
	maxSandboxesPerPrincipal int
	workspace                string
	stageRoots               cmdline.KeyValues
	artifactsDir             string
	stateDir                 string
	store                    string
	redisPrefix              string
	redisLockExpiry          time.Duration
	toolsets                 string
	resultFormat             string
	readOnly                 bool
	memory                   byteSize
	cpus                     float64
	pids                     int64
	dockerImage              string
	dockerHost               string
	dockerTransport          string
	disk                     diskSize
	sandboxIDs               string
	e2b                      e2bOptions
}

// registerSandboxFlags adds the flags that shape sandboxes and tools; the
// defaults of the tools' limits are tools.DefaultConfig's.
func (o *serveOptions) registerSandboxFlags(fs *flag.FlagSet) {
	def := tools.DefaultConfig()
	o.outputLimit, o.maxPutBytes, o.maxReadBytes = byteSize(def.OutputLimit), byteSize(def.MaxPutBytes), byteSize(def.MaxReadBytes)
	o.stageRoots = cmdline.KeyValues{}
	fs.StringVar(&o.provider, "provider", providerAuto, "sandbox provider: local, docker, e2b, or auto (local where bubblewrap is installed; else docker when an engine answers; else local, unisolated; docker off Linux)")
	fs.StringVar(&o.isolation, "isolation", "auto", "local isolation: auto (bwrap when it works), bwrap, or none (unisolated, loudly warned)")
	fs.Var(&o.network, "network", "sandboxes' network: off, on (also --network alone), or allow=HOST[:PORT],... to reach only those hosts through a filtering HTTP proxy (local provider with bwrap; no port means 80 and 443)")
	fs.DurationVar(&o.defaultTimeout, "default-timeout", def.DefaultTimeout, "timeout of a command when the model gives no timeout_sec")
	fs.DurationVar(&o.maxTimeout, "max-timeout", def.MaxTimeout, "ceiling for the model's timeout_sec (larger values are clamped, and the result says so)")
	fs.Var(&o.outputLimit, "output-limit", "inline output per stream (head and tail); the rest stays in a log file")
	fs.Var(&o.maxPutBytes, "max-put-bytes", "largest total of one put_files call")
	fs.Var(&o.maxReadBytes, "max-read-bytes", "largest total one read_files call returns")
	fs.BoolVar(&o.autoRecreate, "auto-recreate", true, "replace a lost sandbox (the failed call is reported, never replayed)")
	fs.DurationVar(&o.idlePause, "idle-pause", 10*time.Minute, "pause a sandbox after this long without a call (0: never)")
	fs.DurationVar(&o.pausedTTL, "paused-ttl", 7*24*time.Hour, "kill sandboxes paused for longer than this (0: never)")
	fs.IntVar(&o.maxSandboxesPerPrincipal, "max-sandboxes-per-principal", manage.DefaultMaxSandboxesPerOwner, "sandboxes (running or paused) one HTTP principal may hold; a new workspace past it gets an error result (0: no limit)")
	fs.StringVar(&o.workspace, "workspace", "", "name of a workspace that survives restarts (default: a fresh anonymous one)")
	fs.Var(o.stageRoots, "stage-root", "NAME=/abs/dir: a host directory stage_inputs may read as host://NAME/... (repeatable)")
	fs.StringVar(&o.artifactsDir, "artifacts-dir", "", "host directory of the artifact store (default: STATE-DIR/artifacts)")
	fs.StringVar(&o.stateDir, "state-dir", defaultStateDir(), "directory for sandboxes and the workspace store")
	fs.StringVar(&o.store, "store", "", "workspace store: empty for the embedded file under --state-dir, or redis://[user:pass@]host:port/db (rediss:// for TLS, unix:///path) shared by several replicas")
	fs.StringVar(&o.redisPrefix, "redis-key-prefix", redisstore.DefaultKeyPrefix, "prefix of every Redis key the store writes (replicas sharing workspaces use the same one)")
	fs.DurationVar(&o.redisLockExpiry, "redis-lock-expiry", redisstore.DefaultLockExpiry, "how long a Redis creation lock outlives a replica that died holding it (renewed every third of it while held)")
	fs.StringVar(&o.toolsets, "toolsets", "all", "comma-separated toolsets to expose: exec, process, files, transfer, admin, or all")
	fs.BoolVar(&o.readOnly, "read-only", false, "expose only tools that change nothing")
	fs.Var(&o.memory, "memory", "memory limit per sandbox (0: the provider default)")
	fs.Float64Var(&o.cpus, "cpus", 0, "CPU limit per sandbox in cores (0: the provider default)")
	fs.Int64Var(&o.pids, "pids", 0, "process limit per sandbox (0: the provider default)")
	fs.StringVar(&o.sandboxIDs, "sandbox-ids", "", "local, root server: FIRST:COUNT, the host uid/gid range sandboxes get one id each from (default 1879048192:65536)")
	fs.StringVar(&o.dockerImage, "docker-image", docker.DefaultImage, "docker: the image sandboxes run (must be on the engine: it is never pulled)")
	fs.StringVar(&o.resultFormat, "result-format", string(tools.ResultText), "text content of tool results: text (written for the model) or json (the output's JSON, for clients that parse the text)")
	fs.StringVar(&o.dockerHost, "docker-host", "", "docker: the engine's address (default: $DOCKER_HOST, else the platform's usual socket: "+strings.Join(docker.CandidateHosts(runtime.GOOS, "~"), ", ")+")")
	fs.StringVar(&o.dockerTransport, "docker-transport", "auto", "docker: how the server reaches envd in a container: socket (a unix socket; Linux), tcp (a port on 127.0.0.1 with a per-container token; what Docker Desktop needs), or auto (socket on Linux, tcp elsewhere)")
	fs.Var(&o.disk, "disk", "disk limit per sandbox, or off for none (workspaces then on the host's filesystem, bounded only by it). local (root server, bwrap): a loop-mounted ext4 image holding the workspace, /tmp and run logs (0: 10GiB). docker: where the engine's storage driver can enforce one (overlay2 on xfs with pquota, btrfs, zfs), else the sandbox says it is not enforced (0: none)")
	o.e2b.register(fs)
}

// toolsConfig is the tools' part of the options.
func (o *serveOptions) toolsConfig() tools.Config {
	cfg := tools.DefaultConfig()
	cfg.DefaultTimeout, cfg.MaxTimeout = o.defaultTimeout, o.maxTimeout
	cfg.OutputLimit, cfg.MaxPutBytes, cfg.MaxReadBytes = int(o.outputLimit), int64(o.maxPutBytes), int64(o.maxReadBytes)
	cfg.StageRoots = map[string]string(o.stageRoots)
	cfg.ArtifactsDir = o.artifactsDir
	if cfg.ArtifactsDir == "" {
		cfg.ArtifactsDir = filepath.Join(o.stateDir, "artifacts")
	}
	cfg.Network = o.network.policy
	cfg.Toolsets = strings.Split(o.toolsets, ",")
	cfg.ReadOnly = o.readOnly
	cfg.ResultFormat, _ = tools.ParseResultFormat(o.resultFormat) // check refused a bad one
	return cfg
}

// check validates the options that do not need the machine. A workspace
// name follows the server's rule (server.ValidWorkspaceName), the same as
// for the Sandbox-Workspace header.
func (o *serveOptions) check() error {
	if o.provider != providerAuto && o.provider != providerLocal && o.provider != docker.Name && o.provider != e2b.Name {
		return fmt.Errorf("--provider %q: want local, docker, e2b or auto", o.provider)
	}
	if o.provider == e2b.Name && o.e2b.apiKey() == "" {
		return errors.New("--provider e2b needs an API key: set --e2b-api-key or E2B_API_KEY (from https://e2b.dev/dashboard)")
	}
	if err := providerUnavailable(o.provider, runtime.GOOS, runtime.GOARCH); err != nil {
		return err
	}
	if _, err := docker.ParseTransport(o.dockerTransport, runtime.GOOS); err != nil {
		return fmt.Errorf("--docker-transport: %w", err)
	}
	switch o.isolation {
	case "auto", "bwrap", "none":
	default:
		return fmt.Errorf("--isolation %q: want auto, bwrap or none", o.isolation)
	}
	if err := checkNetworkProvider(o.network.policy, o.provider, o.isolation); err != nil {
		return err
	}
	if o.defaultTimeout <= 0 || o.maxTimeout <= 0 {
		return errors.New("--default-timeout and --max-timeout must be positive")
	}
	if _, err := tools.ParseResultFormat(o.resultFormat); err != nil {
		return fmt.Errorf("--result-format: %w", err)
	}
	if o.outputLimit < 256 {
		return fmt.Errorf("--output-limit %s is too small (at least 256 bytes)", o.outputLimit.String())
	}
	for name, dir := range o.stageRoots {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("--stage-root %s=%s: the directory must be an absolute path", name, dir)
		}
	}
	if o.store != "" {
		if _, err := redisstore.ParseURL(o.store); err != nil {
			return fmt.Errorf("--store: %w", err)
		}
	}
	if o.redisLockExpiry <= 0 {
		return fmt.Errorf("--redis-lock-expiry %s: give a positive duration", o.redisLockExpiry)
	}
	if o.workspace != "" && !server.ValidWorkspaceName(o.workspace) {
		return fmt.Errorf("--workspace %q: use 1-64 characters from A-Z a-z 0-9 . _ -, not only dots", o.workspace)
	}
	return nil
}

// providerLocal is the local provider's name (manage/local.Name; that
// package builds on Linux only).
const providerLocal = "local"

// providerAuto is --provider's default: see resolveProvider.
const providerAuto = "auto"

// providerUnavailable is why provider cannot run on goos/goarch, or nil
// where it can. The local provider needs Linux (its sandboxes are
// namespaces and cgroups of this machine); the docker provider runs
// everywhere (off Linux through the tcp transport to Docker Desktop's VM).
func providerUnavailable(provider, goos, goarch string) error {
	if goos == "linux" || provider != providerLocal {
		return nil
	}
	return fmt.Errorf("--provider local needs Linux (its sandboxes are namespaces and cgroups of this machine), and this is %s/%s: "+
		"use --provider docker with Docker Desktop, colima or OrbStack (the default here), or --provider e2b", goos, goarch)
}

// resolveProvider turns --provider auto into a provider: local where
// bubblewrap is installed; else docker when an engine answers within two
// seconds; else local (which then runs unisolated and says so). Off Linux
// it is docker, the only provider that runs there.
func (o *serveOptions) resolveProvider(ctx context.Context, log *slog.Logger) {
	if o.provider != providerAuto {
		return
	}
	switch {
	case runtime.GOOS != "linux":
		o.provider = docker.Name
	case bwrapInstalled():
		o.provider = providerLocal
	case docker.Ping(ctx, o.dockerHost, 2*time.Second) == nil:
		log.Info("bubblewrap is not installed and a docker engine answers: using the docker provider (--provider local to override)")
		o.provider = docker.Name
	default:
		o.provider = providerLocal
	}
}

// sandboxProvider is what a stack needs of its provider: the Manager's
// interface and its release.
type sandboxProvider interface {
	manage.Provider
	Close(ctx context.Context) error
}

// stack is everything a serving process runs.
type stack struct {
	provider sandboxProvider
	store    manage.Store
	manager  *manage.Manager
	deps     *tools.Deps
	tools    []tools.Tool // the tools served
	server   *server.Server
}

// close shuts the server down, which shuts the manager down (the
// end-of-session policy, once for every workspace), then releases the
// provider and store. Before the server exists it shuts the manager down
// itself.
func (s *stack) close(ctx context.Context) {
	switch {
	case s.server != nil:
		_ = s.server.Shutdown(ctx)
	case s.manager != nil:
		_ = s.manager.Shutdown(ctx)
	}
	if s.provider != nil {
		_ = s.provider.Close(ctx)
	}
	if s.store != nil {
		_ = s.store.Close()
	}
}

// build checks the options and assembles store, provider, manager, tools
// and server; cfg brings the transport's settings, build fills in the rest.
// It creates no sandbox. On an error it releases what it had opened.
func (o *serveOptions) build(ctx context.Context, log *slog.Logger, cfg server.Config) (*stack, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	st := &stack{}
	ok := false
	defer func() {
		if !ok {
			st.close(context.WithoutCancel(ctx))
		}
	}()
	var err error
	if st.store, err = o.openStore(ctx, log); err != nil {
		return nil, err
	}
	st.store = withTestHoldLock(st.store, log)
	o.resolveProvider(ctx, log)
	if st.provider, err = o.newProvider(ctx, log); err != nil {
		return nil, err
	}
	if dp, isDocker := st.provider.(*docker.Provider); isDocker {
		reapUnowned(ctx, dp, st.store, log)
	}
	mopts := o.managerOptions(st.provider, st.store, log)
	// Servers on this state directory count each other's holds on named
	// workspaces: a sandbox two of them use is paused when the last lets go.
	if mopts.Holders, err = holders.New(filepath.Join(o.stateDir, "holders")); err != nil {
		return nil, err
	}
	if st.manager, err = manage.New(mopts); err != nil {
		return nil, err
	}
	st.deps = tools.NewDeps(st.manager, o.toolsConfig(), log)
	if st.tools, err = tools.Selected(st.deps); err != nil {
		return nil, err
	}
	cfg.Deps, cfg.Tools, cfg.Logger = st.deps, st.tools, log
	cfg.Version = buildVersion()
	if o.workspace != "" {
		cfg.Workspace = tools.Workspace{Key: "stdio:" + o.workspace, Named: true}
	}
	if st.server, err = server.New(cfg); err != nil {
		return nil, err
	}
	warnUnisolated(st.provider, log)
	ok = true
	return st, nil
}

// newProvider starts the provider --provider names: e2b (package
// manage/e2b) on E2B's API, docker (package manage/docker) on its engine,
// else the local provider. On an error it
// returns a nil interface, never a typed nil.
func (o *serveOptions) newProvider(ctx context.Context, log *slog.Logger) (sandboxProvider, error) {
	switch o.provider {
	case e2b.Name:
		return o.newE2BProvider(ctx, log)
	case docker.Name:
	default:
		return o.newLocalProvider(ctx, log)
	}
	transport, err := docker.ParseTransport(o.dockerTransport, runtime.GOOS)
	if err != nil {
		return nil, err
	}
	p, err := docker.New(ctx, docker.Config{
		StateDir: o.stateDir, Image: o.dockerImage, Host: o.dockerHost, Transport: transport, DiskBytes: o.disk.bytes(), Logger: log,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// reapUnowned removes, at start, the docker sandboxes of this server's
// owner that no store record owns (docker.Provider.ReapUnowned), logging
// what it removed; a failure is logged, not fatal.
func reapUnowned(ctx context.Context, p *docker.Provider, store manage.Store, log *slog.Logger) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := p.ReapUnowned(rctx, store, docker.ReapOptions{})
	if err != nil {
		log.Warn("could not remove every docker sandbox no workspace owns", "err", err)
	}
	if n := len(rep.Containers) + len(rep.Volumes) + len(rep.Dirs); n > 0 {
		log.Info("removed docker sandboxes no workspace owns", "containers", rep.Containers, "volumes", rep.Volumes, "dirs", len(rep.Dirs))
	}
}

// openStore opens the workspace store: the embedded bolt file under
// --state-dir, or the Redis at --store.
func (o *serveOptions) openStore(ctx context.Context, log *slog.Logger) (manage.Store, error) {
	if o.store == "" {
		s, err := boltstore.Open(o.stateDir, boltstore.Options{Logger: log})
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	}
	s, err := redisstore.Open(ctx, o.store, redisstore.Options{KeyPrefix: o.redisPrefix, RecordTTL: o.redisRecordTTL(), LockExpiry: o.redisLockExpiry, Logger: log})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// redisRecordTTL is how long a Redis record of a paused, stopped or gone
// sandbox lives: the paused TTL (after which the reaper kills a paused
// sandbox) plus as much again, at least a day, so the record outlives the
// sandbox; with no paused TTL (paused sandboxes are kept forever) records
// never expire.
func (o *serveOptions) redisRecordTTL() time.Duration {
	if o.pausedTTL <= 0 {
		return redisstore.NoExpiry
	}
	return o.pausedTTL + max(o.pausedTTL, 24*time.Hour)
}

// managerOptions are the Manager's options: the sandbox template (network,
// limits) and the lifecycle policy.
func (o *serveOptions) managerOptions(p manage.Provider, store manage.Store, log *slog.Logger) manage.Options {
	return manage.Options{
		Provider: p,
		Store:    store,
		Template: manage.SandboxConfig{
			Network: o.network.policy,
			Limits:  manage.Limits{MemoryBytes: int64(o.memory), CPUs: o.cpus, Pids: o.pids},
		},
		AutoRecreate: o.autoRecreate,
		IdlePause:    o.idlePause,
		PausedTTL:    o.pausedTTL,
		Logger:       log,

		MaxSandboxesPerOwner: o.maxSandboxesPerPrincipal,
		OwnerOf:              server.PrincipalOfKey,
	}
}

// checkNetworkProvider refuses an allow policy where the provider chosen
// cannot enforce it: docker and e2b have no egress proxy (e2b knows only
// allow_internet_access: on or off), and an unisolated local sandbox shares
// the host's network.
func checkNetworkProvider(policy manage.NetworkPolicy, provider, isolation string) error {
	if !policy.IsAllow() {
		return nil
	}
	switch {
	case provider == docker.Name:
		return fmt.Errorf("--network %s: the docker provider does not support allow lists yet; use --network on or off, or --provider local (bwrap)", policy)
	case provider == e2b.Name:
		return fmt.Errorf("--network %s: the e2b provider supports only --network on or off (E2B's allow_internet_access)", policy)
	case isolation == "none":
		return fmt.Errorf("--network %s needs bwrap isolation: an unisolated sandbox shares the host's network, so no proxy could restrict it", policy)
	}
	return nil
}

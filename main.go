// Command sandbox-mcp is an MCP server that gives LLM agents a real sandbox,
// and the in-sandbox daemon (envd) it talks to.
//
// Every flag can also be set through the environment as SANDBOX_MCP_<FLAG>,
// upper case, dashes as underscores (--access-token → SANDBOX_MCP_ACCESS_TOKEN).
// A flag given on the command line wins over the environment.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lmittmann/tint"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/doctor"
	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// the module version recorded by the Go toolchain is used.
var version = ""

// command is one subcommand: its flags and what it runs.
type command struct {
	name    string
	args    string // synopsis of positional arguments
	summary string
	// setup registers flags on fs and returns the function that runs the
	// command once flags are parsed.
	setup func(fs *flag.FlagSet, g *globals) func(ctx context.Context, args []string) error
}

// globals are the flags every subcommand shares.
type globals struct {
	logFormat string
	logLevel  string
	stdout    io.Writer
	stderr    io.Writer
	log       *slog.Logger
}

// exitError carries a specific exit status out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func commands() []command {
	return []command{
		{name: "serve", args: "", summary: "serve MCP over stdio (default) or streamable HTTP (--http ADDR)", setup: serveCommand},
		{name: "call", args: "TOOL [JSON | @FILE | -]", summary: "call one tool through a real in-process MCP session and print what the model sees", setup: callCommand},
		{name: "tools", args: "", summary: "list the tools the model sees, with their schemas (--json for machines)", setup: toolsCommand},
		{name: "doctor", args: "", summary: "check this machine: isolation, providers, directories, versions", setup: doctorCommand},
		{name: "envd", args: "--listen ADDR --root DIR", summary: "run the in-sandbox daemon (E2B envd protocol)", setup: envdCommand},
		{name: "version", summary: "print the version", setup: versionCommand},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process exit status.
func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(argv) == 0 || argv[0] == "-h" || argv[0] == "--help" || argv[0] == "help" {
		usage(stderr, cmds)
		if len(argv) == 0 {
			return 2
		}
		return 0
	}
	var cmd *command
	for i := range cmds {
		if cmds[i].name == argv[0] {
			cmd = &cmds[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "sandbox-mcp: unknown command %q\n\n", argv[0])
		usage(stderr, cmds)
		return 2
	}
	fs := flag.NewFlagSet("sandbox-mcp "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	g := &globals{stdout: stdout, stderr: stderr}
	fs.StringVar(&g.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	runCmd := cmd.setup(fs, g)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sandbox-mcp %s [flags] %s\n\n%s.\n\nflags (each also SANDBOX_MCP_<FLAG>):\n", cmd.name, cmd.args, cmd.summary)
		fs.PrintDefaults()
	}
	if err := fs.Parse(argv[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := applyEnv(fs, os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp %s: %v\n", cmd.name, err)
		return 2
	}
	log, err := newLogger(stderr, g.logFormat, g.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp %s: %v\n", cmd.name, err)
		return 2
	}
	g.log = log
	slog.SetDefault(log)
	if err := runCmd(ctx, fs.Args()); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		fmt.Fprintf(stderr, "sandbox-mcp %s: %v\n", cmd.name, err)
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds []command) {
	fmt.Fprintf(w, "sandbox-mcp: an MCP server that gives LLM agents a real sandbox\n\nusage: sandbox-mcp COMMAND [flags]\n\ncommands:\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'sandbox-mcp COMMAND -h' for a command's flags.\n")
}

// envName is the environment variable that sets flag name.
func envName(name string) string {
	return "SANDBOX_MCP_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applyEnv sets every flag not given on the command line from its
// SANDBOX_MCP_* variable.
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		v, ok := lookup(envName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
		}
	})
	return errors.Join(errs...)
}

// newLogger builds the stderr logger: tint (colour only on a terminal) for
// text, slog's JSON handler for json.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	switch format {
	case "text":
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lvl, NoColor: !isTerminal(w), TimeFormat: "15:04:05.000"})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// stringMap is a repeatable KEY=VALUE flag.
type stringMap map[string]string

func (m stringMap) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// Set adds one KEY=VALUE; from the environment, several are separated by
// newlines (values may contain commas).
func (m stringMap) Set(v string) error {
	for _, item := range strings.FieldsFunc(v, func(r rune) bool { return r == '\n' }) {
		k, val, ok := strings.Cut(item, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", item)
		}
		m[k] = val
	}
	return nil
}

func envdCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	var f daemon.Flags
	f.Register(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unexpected arguments %q", args)
		}
		return f.Run(ctx, g.log)
	}
}

// openReadyFD opens the inherited descriptor fd of --ready-fd, refusing one
// that is not open: a server nobody hears is ready would wait forever.
func openReadyFD(fd int) (*os.File, error) {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("--ready-fd %d is not open: %w", fd, err)
	}
	return os.NewFile(uintptr(fd), "ready-fd"), nil
}

func versionCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	return func(context.Context, []string) error {
		fmt.Fprintf(g.stdout, "sandbox-mcp %s (envd protocol %s)\n", buildVersion(), daemon.Version)
		return nil
	}
}

// buildVersion is the version stamped at build time, else the module version.
func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}

// byteSize is a size flag: 4096, 32KiB, 1MiB, 2GiB, 64MB, 1kB.
type byteSize int64

func (b *byteSize) String() string { return formatBytes(int64(*b)) }

func (b *byteSize) Set(v string) error {
	n, err := parseBytes(v)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

var byteUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"kB", 1000}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}}

func parseBytes(v string) (int64, error) {
	s := strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (examples: 4096, 32KiB, 1MiB)", v)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large (at most %d bytes)", v, int64(math.MaxInt64))
	}
	return n * mult, nil
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

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

// serveOptions are the flags serve and call share: provider, limits,
// workspace, tools, and (serve only) HTTP.
type serveOptions struct {
	provider       string
	isolation      string
	network        bool
	defaultTimeout time.Duration
	maxTimeout     time.Duration
	outputLimit    byteSize
	maxPutBytes    byteSize
	maxReadBytes   byteSize
	autoRecreate   bool
	idlePause      time.Duration
	pausedTTL      time.Duration
	workspace      string
	stageRoots     stringMap
	artifactsDir   string
	stateDir       string
	toolsets       string
	readOnly       bool
	memory         byteSize
	cpus           float64
	pids           int64

	http            string
	authTokensFile  string
	allowedOrigins  string
	tlsCert, tlsKey string
	maxBodyBytes    byteSize
	sessionIdleTTL  time.Duration
	shutdownTimeout time.Duration
	readyFD         int
}

// registerSandboxFlags adds the flags that shape sandboxes and tools.
func (o *serveOptions) registerSandboxFlags(fs *flag.FlagSet) {
	def := tools.DefaultConfig()
	o.outputLimit, o.maxPutBytes, o.maxReadBytes = byteSize(def.OutputLimit), byteSize(def.MaxPutBytes), byteSize(def.MaxReadBytes)
	o.stageRoots = stringMap{}
	fs.StringVar(&o.provider, "provider", "local", "sandbox provider: local (docker and e2b are planned)")
	fs.StringVar(&o.isolation, "isolation", "auto", "local isolation: auto (bwrap when it works), bwrap, or none (unisolated, loudly warned)")
	fs.BoolVar(&o.network, "network", false, "give sandboxes network access")
	fs.DurationVar(&o.defaultTimeout, "default-timeout", def.DefaultTimeout, "timeout of a command when the model gives no timeout_sec")
	fs.DurationVar(&o.maxTimeout, "max-timeout", def.MaxTimeout, "ceiling for the model's timeout_sec (larger values are clamped, and the result says so)")
	fs.Var(&o.outputLimit, "output-limit", "inline output per stream (head and tail); the rest stays in a log file")
	fs.Var(&o.maxPutBytes, "max-put-bytes", "largest total of one put_files call")
	fs.Var(&o.maxReadBytes, "max-read-bytes", "largest total one read_files call returns")
	fs.BoolVar(&o.autoRecreate, "auto-recreate", true, "replace a lost sandbox (the failed call is reported, never replayed)")
	fs.DurationVar(&o.idlePause, "idle-pause", 10*time.Minute, "pause a sandbox after this long without a call (0: never)")
	fs.DurationVar(&o.pausedTTL, "paused-ttl", 7*24*time.Hour, "kill sandboxes paused for longer than this (0: never)")
	fs.StringVar(&o.workspace, "workspace", "", "name of a workspace that survives restarts (default: a fresh anonymous one)")
	fs.Var(o.stageRoots, "stage-root", "NAME=/abs/dir: a host directory stage_inputs may read as host://NAME/... (repeatable)")
	fs.StringVar(&o.artifactsDir, "artifacts-dir", "", "host directory of the artifact store (default: STATE-DIR/artifacts)")
	fs.StringVar(&o.stateDir, "state-dir", defaultStateDir(), "directory for sandboxes and the workspace store")
	fs.StringVar(&o.toolsets, "toolsets", "all", "comma-separated toolsets to expose: exec, process, files, transfer, admin, or all")
	fs.BoolVar(&o.readOnly, "read-only", false, "expose only tools that change nothing")
	fs.Var(&o.memory, "memory", "memory limit per sandbox (0: the provider default)")
	fs.Float64Var(&o.cpus, "cpus", 0, "CPU limit per sandbox in cores (0: the provider default)")
	fs.Int64Var(&o.pids, "pids", 0, "process limit per sandbox (0: the provider default)")
}

// registerHTTPFlags adds serve's transport flags.
func (o *serveOptions) registerHTTPFlags(fs *flag.FlagSet) {
	o.maxBodyBytes = byteSize(server.DefaultMaxBodyBytes)
	fs.StringVar(&o.http, "http", "", "serve streamable HTTP at ADDR (host:port) on /mcp instead of stdio")
	fs.StringVar(&o.authTokensFile, "auth-tokens-file", "", "file of \"TOKEN PRINCIPAL\" lines; required unless --http is loopback")
	fs.StringVar(&o.allowedOrigins, "allowed-origins", "", "comma-separated browser origins allowed to call (others get 403)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate: serve HTTPS")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.Var(&o.maxBodyBytes, "max-body-bytes", "largest HTTP request body (413 beyond)")
	fs.DurationVar(&o.sessionIdleTTL, "session-idle-ttl", 30*time.Minute, "end HTTP sessions idle this long (0: never)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "on SIGTERM, how long in-flight calls get before they are cancelled")
	fs.IntVar(&o.readyFD, "ready-fd", 0, "file descriptor to write \"ready URL\" to once HTTP is listening (0: none)")
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
	cfg.Network = o.network
	cfg.Toolsets = strings.Split(o.toolsets, ",")
	cfg.ReadOnly = o.readOnly
	return cfg
}

// check validates the options that do not need the machine.
func (o *serveOptions) check() error {
	if o.provider != "local" {
		return fmt.Errorf("--provider %q is not available in this version: only local is implemented (docker and e2b are planned)", o.provider)
	}
	switch o.isolation {
	case "auto", "bwrap", "none":
	default:
		return fmt.Errorf("--isolation %q: want auto, bwrap or none", o.isolation)
	}
	if o.defaultTimeout <= 0 || o.maxTimeout <= 0 {
		return errors.New("--default-timeout and --max-timeout must be positive")
	}
	if o.outputLimit < 256 {
		return fmt.Errorf("--output-limit %s is too small (at least 256 bytes)", o.outputLimit.String())
	}
	for name, dir := range o.stageRoots {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("--stage-root %s=%s: the directory must be an absolute path", name, dir)
		}
	}
	if o.workspace != "" && !server.ValidWorkspaceName(o.workspace) {
		return fmt.Errorf("--workspace %q: use 1-64 characters from A-Z a-z 0-9 . _ -, not only dots", o.workspace)
	}
	return nil
}

// stack is everything a serving process runs.
type stack struct {
	provider *local.Provider
	store    *boltstore.Store
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

// build assembles provider, store, manager, tools and server.
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
	st.store, err = boltstore.Open(o.stateDir, boltstore.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	st.provider, err = local.New(ctx, local.Config{StateDir: o.stateDir, Isolation: o.isolation, Logger: log})
	if err != nil {
		return nil, err
	}
	st.manager, err = manage.New(manage.Options{
		Provider: st.provider,
		Store:    st.store,
		Template: manage.SandboxConfig{
			Network: o.network,
			Limits:  manage.Limits{MemoryBytes: int64(o.memory), CPUs: o.cpus, Pids: o.pids},
		},
		AutoRecreate: o.autoRecreate,
		IdlePause:    o.idlePause,
		PausedTTL:    o.pausedTTL,
		Logger:       log,
	})
	if err != nil {
		return nil, err
	}
	st.deps = tools.NewDeps(st.manager, o.toolsConfig(), log)
	st.tools, err = tools.Selected(st.deps)
	if err != nil {
		return nil, err
	}
	cfg.Deps, cfg.Tools, cfg.Logger = st.deps, st.tools, log
	cfg.Version = buildVersion()
	if o.workspace != "" {
		cfg.Workspace = tools.Workspace{Key: "stdio:" + o.workspace, Named: true}
	}
	st.server, err = server.New(cfg)
	if err != nil {
		return nil, err
	}
	if st.provider.Isolation() == "none" {
		log.Warn("sandboxes run WITHOUT isolation: commands run as this user on this machine; install bubblewrap (apt-get install bubblewrap) for isolated sandboxes")
	}
	ok = true
	return st, nil
}

func serveCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	o := &serveOptions{}
	o.registerSandboxFlags(fs)
	o.registerHTTPFlags(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unexpected arguments %q", args)
		}
		cfg := server.Config{
			MaxBodyBytes:    int64(o.maxBodyBytes),
			SessionIdleTTL:  o.sessionIdleTTL,
			TLSCert:         o.tlsCert,
			TLSKey:          o.tlsKey,
			ShutdownTimeout: o.shutdownTimeout,
		}
		if o.allowedOrigins != "" {
			// server.New trims them and skips empty ones.
			cfg.AllowedOrigins = strings.Split(o.allowedOrigins, ",")
		}
		var ready *os.File
		if o.readyFD > 0 {
			var err error
			if ready, err = openReadyFD(o.readyFD); err != nil {
				return err
			}
			defer ready.Close()
		}
		if o.http != "" {
			if o.authTokensFile != "" {
				tokens, err := server.LoadTokens(o.authTokensFile)
				if err != nil {
					return err
				}
				cfg.AuthTokens = tokens
			}
			if err := server.CheckListen(o.http, cfg.AuthTokens); err != nil {
				return err
			}
		}
		st, err := o.build(ctx, g.log, cfg)
		if err != nil {
			return err
		}
		defer st.close(context.Background())
		if o.http == "" {
			return st.server.ServeStdio(ctx, os.Stdin, g.stdout)
		}
		ln, err := net.Listen("tcp", o.http)
		if err != nil {
			return fmt.Errorf("--http %s: %w", o.http, err)
		}
		if ready != nil {
			// Close it once written: processes sandboxes spawn must not
			// inherit it.
			_, err := fmt.Fprintf(ready, "ready %s\n", st.server.EndpointURL(ln.Addr()))
			if cerr := ready.Close(); err == nil && cerr != nil {
				err = cerr
			}
			if err != nil {
				ln.Close()
				return fmt.Errorf("--ready-fd %d: %w", o.readyFD, err)
			}
		}
		return st.server.ServeHTTP(ctx, ln)
	}
}

func toolsCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	o := &serveOptions{}
	o.registerSandboxFlags(fs)
	asJSON := fs.Bool("json", false, "print machine-readable JSON (names, titles, descriptions, toolsets, annotations, input and output schemas)")
	markdown := fs.Bool("markdown", false, "print the README's tool table")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unexpected arguments %q", args)
		}
		d := tools.NewDeps(nil, o.toolsConfig(), g.log)
		selected, err := tools.Selected(d)
		if err != nil {
			return err
		}
		switch {
		case *asJSON:
			enc := json.NewEncoder(g.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(tools.Describe(selected))
		case *markdown:
			_, err := io.WriteString(g.stdout, tools.MarkdownTable(selected))
			return err
		}
		for i, desc := range tools.Describe(selected) {
			if i > 0 {
				fmt.Fprintln(g.stdout)
			}
			a := desc.Annotations
			fmt.Fprintf(g.stdout, "%s — %s  [toolset %s; readOnly=%v destructive=%v idempotent=%v openWorld=%v]\n",
				desc.Name, desc.Title, desc.Toolset, a.ReadOnly, a.Destructive, a.Idempotent, a.OpenWorld)
			fmt.Fprintf(g.stdout, "\n%s\n\ninput schema:\n%s\noutput schema:\n%s\n", wrap(desc.Description, 100), indentJSON(desc.InputSchema), indentJSON(desc.OutputSchema))
		}
		fmt.Fprintf(g.stdout, "\nserver instructions:\n%s\n", wrap(tools.Instructions(d.Config), 100))
		return nil
	}
}

func indentJSON(raw []byte) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "  ", "  "); err != nil {
		return string(raw)
	}
	return "  " + b.String()
}

// wrap breaks text into lines of at most width characters, keeping
// paragraphs.
func wrap(text string, width int) string {
	var out []string
	for _, para := range strings.Split(text, "\n") {
		line := ""
		for _, w := range strings.Fields(para) {
			if line != "" && len(line)+1+len(w) > width {
				out = append(out, line)
				line = w
				continue
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

func callCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	o := &serveOptions{}
	o.registerSandboxFlags(fs)
	asJSON := fs.Bool("json", false, "print the whole result as JSON (content, structuredContent, isError)")
	return func(ctx context.Context, args []string) error {
		if len(args) < 1 || len(args) > 2 {
			fs.Usage()
			return exitError{2}
		}
		name := args[0]
		raw := "{}"
		if len(args) == 2 {
			var err error
			if raw, err = readCallArgs(args[1]); err != nil {
				fmt.Fprintf(g.stderr, "sandbox-mcp call: %v\n", err)
				return exitError{2}
			}
		}
		// The stack creates no sandbox before the call: a typo or bad JSON
		// costs nothing but opening the state directory.
		st, err := o.build(ctx, g.log, server.Config{})
		if err != nil {
			return err
		}
		defer st.close(context.Background())
		var schema json.RawMessage
		names := make([]string, 0, len(st.tools))
		for _, tl := range st.tools {
			names = append(names, tl.Def.Name)
			if tl.Def.Name == name {
				schema = tl.Def.RawInputSchema
			}
		}
		if schema == nil {
			fmt.Fprintf(g.stderr, "sandbox-mcp call: unknown tool %q; the tools are: %s\n", name, strings.Join(names, ", "))
			return exitError{2}
		}
		var arguments map[string]any
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&arguments); err != nil || arguments == nil {
			if err == nil {
				err = errors.New("got null")
			}
			fmt.Fprintf(g.stderr, "sandbox-mcp call: the arguments must be one JSON object: %v\n\n%s input schema:\n%s\n", err, name, indentJSON(schema))
			return exitError{2}
		}
		c, err := mcpclient.NewInProcessClient(st.server.MCP())
		if err != nil {
			return err
		}
		defer c.Close()
		c.OnNotification(func(n mcp.JSONRPCNotification) {
			if n.Method == string(mcp.MethodNotificationProgress) {
				if msg, ok := n.Params.AdditionalFields["message"].(string); ok {
					fmt.Fprintf(g.stderr, "progress: %s\n", msg)
				}
			}
		})
		if err := c.Start(ctx); err != nil {
			return err
		}
		init := mcp.InitializeRequest{}
		init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
		init.Params.ClientInfo = mcp.Implementation{Name: "sandbox-mcp call", Version: buildVersion()}
		if _, err := c.Initialize(ctx, init); err != nil {
			return err
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = name
		req.Params.Arguments = arguments
		req.Params.Meta = &mcp.Meta{ProgressToken: "call"}
		res, err := c.CallTool(ctx, req)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if *asJSON {
			enc := json.NewEncoder(g.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(res); err != nil {
				return err
			}
		} else {
			for _, content := range res.Content {
				switch ct := content.(type) {
				case mcp.TextContent:
					fmt.Fprintln(g.stdout, ct.Text)
				case mcp.ImageContent:
					fmt.Fprintf(g.stdout, "[image %s, %d bytes of base64]\n", ct.MIMEType, len(ct.Data))
				default:
					raw, _ := json.Marshal(ct)
					fmt.Fprintln(g.stdout, string(raw))
				}
			}
		}
		if res.IsError {
			if isArgumentError(res) {
				fmt.Fprintf(g.stderr, "\n%s input schema:\n%s\n", name, indentJSON(schema))
				return exitError{2}
			}
			return exitError{1}
		}
		return nil
	}
}

// readCallArgs reads call's argument: literal JSON, @FILE, or - for stdin.
func readCallArgs(arg string) (string, error) {
	switch {
	case arg == "-":
		b, err := io.ReadAll(os.Stdin)
		return string(b), err
	case strings.HasPrefix(arg, "@"):
		b, err := os.ReadFile(arg[1:])
		if err != nil {
			return "", fmt.Errorf("reading arguments: %w", err)
		}
		return string(b), nil
	}
	return arg, nil
}

// isArgumentError reports whether an isError result is about the
// arguments, not the tool's work. The tools validate their own arguments
// (mcp-go's input schema validation is off) and report every bad argument
// as a tools.InputError, whose text starts with "invalid argument"
// ("invalid argument FIELD: …" or "invalid arguments: …"), after the
// notices if any. Matching the start of a paragraph, not any substring,
// keeps an error that merely quotes EINVAL ("invalid argument") out.
func isArgumentError(res *mcp.CallToolResult) bool {
	for _, content := range res.Content {
		if tc, ok := content.(mcp.TextContent); ok {
			for _, para := range strings.Split(tc.Text, "\n\n") {
				if strings.HasPrefix(para, "invalid argument") {
					return true
				}
			}
		}
	}
	return false
}

func doctorCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	o := &serveOptions{}
	o.registerSandboxFlags(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unexpected arguments %q", args)
		}
		rep := doctor.Run(ctx, doctor.Config{
			Provider:     o.provider,
			Isolation:    o.isolation,
			StateDir:     o.stateDir,
			ArtifactsDir: o.toolsConfig().ArtifactsDir,
			Version:      buildVersion(),
			EnvdVersion:  daemon.Version,
		})
		if *asJSON {
			if err := rep.WriteJSON(g.stdout); err != nil {
				return err
			}
		} else {
			rep.WriteText(g.stdout)
		}
		if !rep.OK() {
			return exitError{1}
		}
		return nil
	}
}

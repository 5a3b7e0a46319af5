// Command sandbox-mcp is an MCP server that gives LLM agents a real sandbox,
// and the in-sandbox daemon (envd) it talks to.
//
// Every flag can also be set through the environment as SANDBOX_MCP_<FLAG>,
// upper case, dashes as underscores (--access-token → SANDBOX_MCP_ACCESS_TOKEN).
// A flag given on the command line wins over the environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"github.com/lmittmann/tint"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
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
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lvl, NoColor: !isTerminal(w), TimeFormat: "15:04:05.000"})), nil
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
// newlines or commas.
func (m stringMap) Set(v string) error {
	for _, item := range strings.FieldsFunc(v, func(r rune) bool { return r == '\n' || r == ',' }) {
		k, val, ok := strings.Cut(item, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", item)
		}
		m[k] = val
	}
	return nil
}

func envdCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	var cfg daemon.Config
	env := stringMap{}
	listen := fs.String("listen", "127.0.0.1:49983", "address: host:port or unix:/path/to/socket")
	fs.StringVar(&cfg.Root, "root", "", "workspace directory: relative paths and the default cwd resolve against it (required)")
	fs.BoolVar(&cfg.Confine, "confine", false, "refuse any path that resolves (symlinks followed) outside --root")
	fs.StringVar(&cfg.AccessToken, "access-token", "", "require this token in X-Access-Token (all but /health)")
	fs.StringVar(&cfg.DefaultUser, "user", "", "user for requests that name none (default: the daemon's own user)")
	fs.Var(env, "env", "KEY=VALUE given to every process and served by /envs (repeatable)")
	fs.Int64Var(&cfg.MaxUploadBytes, "max-upload-bytes", 0, "largest POST /files body in bytes (0: no limit)")
	readyFD := fs.Int("ready-fd", 0, "file descriptor to write \"ready ADDR\" to once listening (0: none)")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unexpected arguments %q", args)
		}
		if cfg.Root == "" {
			return errors.New("--root is required")
		}
		cfg.Env = env
		cfg.Logger = g.log
		var ready io.Writer
		if *readyFD > 0 {
			f := os.NewFile(uintptr(*readyFD), "ready-fd")
			if f == nil {
				return fmt.Errorf("--ready-fd %d is not open", *readyFD)
			}
			defer f.Close()
			ready = f
		}
		return daemon.Run(ctx, cfg, *listen, ready)
	}
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

package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/sandbox-mcp/sandbox-mcp/internal/cmdline"
)

// Flags are the command-line settings of an envd process. Both envd
// commands use them: the server's `sandbox-mcp envd` subcommand and the lean
// sandbox-envd binary (Main), so the two take the same flags.
type Flags struct {
	// Config is the daemon's configuration; Env and Logger are filled by
	// Run.
	Config
	// Listen is the address: host:port or unix:/path. Default
	// 127.0.0.1:49983, E2B envd's port.
	Listen string
	// ReadyFD is an inherited descriptor that receives "ready ADDR\n" once
	// the daemon listens, then is closed; 0 means none.
	ReadyFD int
	// ProxyForward, when set ("127.0.0.1:3128=unix:/path"), makes envd
	// forward TCP connections on that address to the unix socket and
	// give every process the proxy variables (ProxyEnv) pointing there.
	// Default none.
	ProxyForward string
	// NoProxy is NO_PROXY for processes under ProxyForward. Default none.
	NoProxy string

	env cmdline.KeyValues
}

// DefaultListen is the address envd listens on without --listen: E2B
// envd's port on loopback.
const DefaultListen = "127.0.0.1:49983"

// Register defines the envd flags on fs, each stored in f.
func (f *Flags) Register(fs *flag.FlagSet) {
	f.env = cmdline.KeyValues{}
	fs.StringVar(&f.Listen, "listen", DefaultListen, "address: host:port, unix:/path/to/socket, or fd:N (a listening socket inherited as descriptor N)")
	fs.StringVar(&f.Root, "root", "", "workspace directory: relative paths and the default cwd resolve against it (required)")
	fs.BoolVar(&f.Confine, "confine", false, "refuse any path that resolves (symlinks followed) outside --root")
	fs.StringVar(&f.AccessToken, "access-token", "", "require this token in X-Access-Token (all but /health)")
	fs.StringVar(&f.DefaultUser, "user", "", "user for requests that name none (default: the daemon's own user)")
	fs.Var(f.env, "env", "KEY=VALUE given to every process and served by /envs (repeatable)")
	fs.Int64Var(&f.MaxUploadBytes, "max-upload-bytes", 0, "largest POST /files body in bytes (0: no limit)")
	fs.IntVar(&f.ReadyFD, "ready-fd", 0, "file descriptor to write \"ready ADDR\" to once listening (0: none)")
	fs.StringVar(&f.ProxyForward, "proxy-forward", "", "HOST:PORT=unix:/path: forward TCP connections on HOST:PORT to the unix socket (the host's egress proxy) and set HTTP(S)_PROXY and ALL_PROXY to it for every process")
	fs.StringVar(&f.NoProxy, "no-proxy", "", "NO_PROXY for processes under --proxy-forward (comma-separated)")
}

// Run serves the daemon the flags describe until ctx ends, logging to log
// (nil: slog.Default()). It fails at once outside Linux, when --root is
// missing or when --ready-fd names a descriptor that is not open.
func (f *Flags) Run(ctx context.Context, log *slog.Logger) error {
	if errPlatform != nil {
		return errPlatform
	}
	if f.Root == "" {
		return errors.New("--root is required")
	}
	cfg := f.Config
	cfg.Env = f.env
	cfg.Logger = log
	if log == nil {
		log = slog.Default()
	}
	if f.ProxyForward != "" {
		fw, err := ParseProxyForward(f.ProxyForward)
		if err != nil {
			return err
		}
		env := ProxyEnv(fw.Listen, f.NoProxy)
		for k, v := range f.env {
			env[k] = v
		}
		cfg.Env = env
		stop, err := serveProxyForward(ctx, fw, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	// The ready descriptor is closed as soon as Run writes its line:
	// processes the daemon spawns must not inherit it.
	ready, err := cmdline.OpenReadyFD(f.ReadyFD)
	if err != nil {
		return err
	}
	defer func() { _ = ready.Close() }()
	return Run(ctx, cfg, f.Listen, ready.Writer())
}

// CommandName is the name of the lean envd binary Main runs as.
const CommandName = "sandbox-envd"

// Main runs the lean envd command (sandbox-envd) on args, the arguments
// after the program name, and returns its exit status: 0 after a clean
// shutdown when ctx ends, 1 when the daemon fails, 2 for a usage error.
//
// It takes an optional leading "envd" (so the lean binary and `sandbox-mcp
// envd` run with the same arguments), then the flags of Flags.Register and
// --log-format (text or json, default text) and --log-level (debug, info,
// warn or error, default info); every flag not given is taken from its
// cmdline.EnvName variable when set. Logs go to stderr.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "envd" {
		args = args[1:]
	}
	fs := flag.NewFlagSet(CommandName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f Flags
	f.Register(fs)
	logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s [envd] --listen ADDR --root DIR [flags]\n\n"+
			"The in-sandbox daemon of sandbox-mcp (E2B envd protocol %s), without the MCP server.\n\n"+
			"flags (each also SANDBOX_MCP_<FLAG>):\n", CommandName, Version)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usageError := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", CommandName, err)
		return 2
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if err := cmdline.ApplyEnv(fs, os.LookupEnv); err != nil {
		return usageError(err)
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return usageError(err)
	}
	slog.SetDefault(log)
	if f.Root == "" {
		return usageError(errors.New("--root is required"))
	}
	if err := f.Run(ctx, log); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", CommandName, err)
		return 1
	}
	return 0
}

// newLogger builds the stderr logger of Main with log/slog's own handlers.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

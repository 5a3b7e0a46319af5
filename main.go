// Command sandbox-mcp is an MCP server that gives LLM agents a real sandbox,
// and the in-sandbox daemon (envd) it talks to.
//
// Every flag can also be set through the environment as SANDBOX_MCP_<FLAG>,
// upper case, dashes as underscores (--access-token → SANDBOX_MCP_ACCESS_TOKEN).
// A flag given on the command line wins over the environment.
//
// This package is only the command line: main.go holds the command
// framework, each command has its file (serve.go, call.go, tools.go,
// doctor.go, envd.go, manage.go, version.go), flags.go the flag types and the
// environment mapping, stack.go the assembly of provider, store, manager,
// tools and server that serve and call run, and readyfd.go the --ready-fd
// signal.
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
	"syscall"

	"github.com/sandbox-mcp/sandbox-mcp/internal/cmdline"

	"github.com/lmittmann/tint"
)

// command is one subcommand: its flags and what it runs.
type command struct {
	name    string
	args    string // synopsis of positional arguments
	summary string
	// setup registers flags on fs and returns the function that runs the
	// command once flags are parsed.
	setup func(fs *flag.FlagSet, g *globals) func(ctx context.Context, args []string) error
}

// globals are the flags every subcommand shares, and its output.
type globals struct {
	logFormat string
	logLevel  string
	stdout    io.Writer
	stderr    io.Writer
	log       *slog.Logger
}

// exitError carries a specific exit status out of a command; run prints
// nothing for it (the command has said why).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// commands lists the subcommands in the order usage shows them.
func commands() []command {
	return []command{
		{name: "serve", args: "", summary: "serve MCP over stdio (default) or streamable HTTP (--http ADDR)", setup: serveCommand},
		{name: "call", args: "TOOL [JSON | @FILE | -]", summary: "call one tool through a real in-process MCP session and print what the model sees", setup: callCommand},
		{name: "tools", args: "", summary: "list the tools the model sees, with their schemas (--json for machines)", setup: toolsCommand},
		{name: "doctor", args: "", summary: "check this machine: isolation, providers, directories, versions", setup: doctorCommand},
		{name: "envd", args: "--listen ADDR --root DIR", summary: "run the in-sandbox daemon (E2B envd protocol)", setup: envdCommand},
		{name: "manage serve", args: "", summary: "serve a local E2B-compatible management API and envd proxy (--listen ADDR --api-key K)", setup: manageServeCommand},
		{name: "version", summary: "print the version", setup: versionCommand},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process exit status: 0,
// 1 when the command failed, 2 for a usage error (or a command's own
// exitError).
func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(argv) == 0 || argv[0] == "-h" || argv[0] == "--help" || argv[0] == "help" {
		usage(stderr, cmds)
		if len(argv) == 0 {
			return 2
		}
		return 0
	}
	// A two-word command ("manage serve") is looked up by both words.
	if len(argv) > 1 && findCommand(cmds, argv[0]+" "+argv[1]) != nil {
		argv = append([]string{argv[0] + " " + argv[1]}, argv[2:]...)
	}
	cmd := findCommand(cmds, argv[0])
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
	if err := fs.Parse(joinFlagValues(argv[1:])); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := cmdline.ApplyEnv(fs, os.LookupEnv); err != nil {
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

// findCommand returns the command called name, or nil.
func findCommand(cmds []command, name string) *command {
	for i := range cmds {
		if cmds[i].name == name {
			return &cmds[i]
		}
	}
	return nil
}

// usage prints the list of commands.
func usage(w io.Writer, cmds []command) {
	fmt.Fprintf(w, "sandbox-mcp: an MCP server that gives LLM agents a real sandbox\n\nusage: sandbox-mcp COMMAND [flags]\n\ncommands:\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'sandbox-mcp COMMAND -h' for a command's flags.\n")
}

// noArgs is the check of commands that take no positional arguments.
func noArgs(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q", args)
	}
	return nil
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

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

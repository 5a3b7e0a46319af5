package main

import (
	"context"
	"errors"
	"flag"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
)

// envdCommand is `sandbox-mcp envd`: the in-sandbox daemon, serving the
// E2B envd protocol on --listen until it is signalled, announcing its
// address on --ready-fd.
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
		if err := noArgs(args); err != nil {
			return err
		}
		if cfg.Root == "" {
			return errors.New("--root is required")
		}
		cfg.Env = env
		cfg.Logger = g.log
		ready, err := openReadyFD(*readyFD)
		if err != nil {
			return err
		}
		defer ready.Close()
		// daemon.Run writes its "ready ADDR" line through ready, which closes
		// the descriptor: processes the daemon spawns must not inherit it.
		return daemon.Run(ctx, cfg, *listen, ready.writer())
	}
}

package main

import (
	"context"
	"flag"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
)

// envdCommand is `sandbox-mcp envd`: the in-sandbox daemon, serving the
// E2B envd protocol on --listen until it is signalled, announcing its
// address on --ready-fd. Its flags and run logic are daemon.Flags, shared
// with the lean sandbox-envd binary that `make build` embeds.
func envdCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	var f daemon.Flags
	f.Register(fs)
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		return f.Run(ctx, g.log)
	}
}

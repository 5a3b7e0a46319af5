package main

import (
	"context"
	"flag"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/search"
)

// envdCommand is `sandbox-mcp envd`: the in-sandbox daemon, serving the
// E2B envd protocol on --listen until it is signalled, announcing its
// address on --ready-fd. Its flags and run logic are daemon.Flags, shared
// with the lean sandbox-envd binary that `make build` embeds.
//
// `sandbox-mcp envd search --root DIR --pattern RE [flags]` is the search
// mode of package envd/search instead, as in the lean envd, so a sandbox
// that runs this binary as its envd (one built without the embedded lean
// envd) answers search_files without an upload.
func envdCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	var f daemon.Flags
	f.Register(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 && args[0] == search.Command {
			if code := search.Main(ctx, args[1:], g.stdout, g.stderr); code != 0 {
				return exitError{code: code}
			}
			return nil
		}
		if err := noArgs(args); err != nil {
			return err
		}
		return f.Run(ctx, g.log)
	}
}

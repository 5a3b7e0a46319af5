//go:build linux

// Command sandbox-envd is sandbox-mcp's in-sandbox daemon (E2B envd
// protocol) on its own: the same daemon and flags as `sandbox-mcp envd`,
// without the MCP server linked in, so it starts faster. `make build` embeds
// it, built for Linux, in the sandbox-mcp binary, whose local sandboxes run
// it.
//
//	sandbox-envd [envd] --listen ADDR --root DIR [flags]
//	sandbox-envd [envd] search --root DIR --pattern RE [flags]
//
// The search mode (package envd/search) is what the search_files tool runs
// inside a sandbox; `sandbox-mcp envd search` is the same, so either binary
// answers the same command line.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/search"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	args := os.Args[1:]
	if len(args) > 1 && args[0] == "envd" && args[1] == search.Command {
		args = args[1:]
	}
	var code int
	if len(args) > 0 && args[0] == search.Command {
		code = search.Main(ctx, args[1:], os.Stdout, os.Stderr)
	} else {
		code = daemon.Main(ctx, args, os.Stderr)
	}
	stop()
	os.Exit(code)
}

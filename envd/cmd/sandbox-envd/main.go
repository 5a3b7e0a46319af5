//go:build linux

// Command sandbox-envd is sandbox-mcp's in-sandbox daemon (E2B envd
// protocol) on its own: the same daemon and flags as `sandbox-mcp envd`,
// without the MCP server linked in, so it starts faster. `make build` embeds
// it, built for Linux, in the sandbox-mcp binary, whose local sandboxes run
// it.
//
//	sandbox-envd [envd] --listen ADDR --root DIR [flags]
//	sandbox-envd search --root DIR --pattern RE [flags]
//
// The search mode (package envd/search) is what the search_files tool runs
// inside a sandbox.
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
	var code int
	if len(os.Args) > 1 && os.Args[1] == search.Command {
		code = search.Main(ctx, os.Args[2:], os.Stdout, os.Stderr)
	} else {
		code = daemon.Main(ctx, os.Args[1:], os.Stderr)
	}
	stop()
	os.Exit(code)
}

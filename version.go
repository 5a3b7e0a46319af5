package main

import (
	"context"
	"flag"
	"fmt"
	"runtime/debug"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// the module version recorded by the Go toolchain is used.
var version = ""

// versionCommand is `sandbox-mcp version`: the server's version and the
// envd protocol version it speaks.
func versionCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	return func(context.Context, []string) error {
		fmt.Fprintf(g.stdout, "sandbox-mcp %s (envd protocol %s)\n", buildVersion(), daemon.Version)
		return nil
	}
}

// buildVersion is the version stamped at build time, else the module
// version, else "devel".
func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}

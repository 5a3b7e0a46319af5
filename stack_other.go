//go:build !linux

package main

import (
	"context"
	"log/slog"
	"runtime"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2b"
)

// newProvider starts the e2b provider, the one that runs here; the others
// need a Linux host, and check refuses them before this is reached.
func (o *serveOptions) newProvider(ctx context.Context, log *slog.Logger) (sandboxProvider, error) {
	if o.provider == e2b.Name {
		return o.newE2BProvider(ctx, log)
	}
	return nil, providerUnavailable(o.provider, runtime.GOOS, runtime.GOARCH)
}

// warnUnisolated has nothing to warn of: E2B's sandboxes are microVMs.
func warnUnisolated(sandboxProvider, *slog.Logger) {}

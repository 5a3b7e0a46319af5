//go:build !linux

package main

import (
	"context"
	"log/slog"
	"runtime"
)

// newProvider refuses: both providers of this version need a Linux host,
// and check refuses them before this is reached.
func (o *serveOptions) newProvider(context.Context, *slog.Logger) (sandboxProvider, error) {
	return nil, providerUnavailable(o.provider, runtime.GOOS, runtime.GOARCH)
}

// warnUnisolated has nothing to warn of: no provider runs here.
func warnUnisolated(sandboxProvider, *slog.Logger) {}

// refuseUnisolatedHTTP has nothing to refuse: no provider runs here.
func refuseUnisolatedHTTP(sandboxProvider, string) error { return nil }

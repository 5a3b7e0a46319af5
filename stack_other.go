//go:build !linux

package main

import (
	"context"
	"log/slog"
	"runtime"
)

// newLocalProvider refuses: the local provider needs Linux, and check
// refuses it before this is reached.
func (o *serveOptions) newLocalProvider(context.Context, *slog.Logger) (sandboxProvider, error) {
	return nil, providerUnavailable(providerLocal, runtime.GOOS, runtime.GOARCH)
}

// bwrapInstalled is false: bubblewrap is Linux's.
func bwrapInstalled() bool { return false }

// warnUnisolated has nothing to warn of: only docker and e2b sandboxes run
// here.
func warnUnisolated(sandboxProvider, *slog.Logger) {}

// refuseUnisolatedHTTP has nothing to refuse: no provider runs here.
func refuseUnisolatedHTTP(sandboxProvider, string) error { return nil }

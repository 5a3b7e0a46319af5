//go:build !testhooks

package main

import (
	"log/slog"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// withTestHoldLock returns store: the hook of testHoldLockEnv is only in
// binaries built with -tags testhooks.
func withTestHoldLock(store manage.Store, _ *slog.Logger) manage.Store { return store }

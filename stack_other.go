//go:build !linux

package main

import (
	"context"
	"log/slog"
)

// newProvider refuses with errLocalProvider: the local provider needs
// Linux, and check refuses it before this is reached.
func (o *serveOptions) newProvider(context.Context, *slog.Logger) (sandboxProvider, error) {
	return nil, errLocalProvider
}

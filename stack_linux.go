package main

import (
	"context"
	"log/slog"

	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

// newProvider starts the local provider (package manage/local) on the
// state directory, with the isolation asked for.
func (o *serveOptions) newProvider(ctx context.Context, log *slog.Logger) (sandboxProvider, error) {
	p, err := local.New(ctx, local.Config{StateDir: o.stateDir, Isolation: o.isolation, Logger: log})
	if err != nil {
		return nil, err
	}
	return p, nil
}

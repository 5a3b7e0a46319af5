package main

import (
	"context"
	"log/slog"
	"os/exec"

	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

// newLocalProvider starts the local provider (package manage/local) on the
// state directory, with the isolation asked for.
func (o *serveOptions) newLocalProvider(ctx context.Context, log *slog.Logger) (sandboxProvider, error) {
	p, err := local.New(ctx, local.Config{StateDir: o.stateDir, Isolation: o.isolation, Logger: log})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// bwrapInstalled reports whether bubblewrap is on PATH.
func bwrapInstalled() bool {
	_, err := exec.LookPath("bwrap")
	return err == nil
}

// warnUnisolated logs loudly when the local provider runs without
// isolation (no usable bubblewrap).
func warnUnisolated(p sandboxProvider, log *slog.Logger) {
	if lp, isLocal := p.(*local.Provider); isLocal && lp.Isolation() == "none" {
		log.Warn("sandboxes run WITHOUT isolation: commands run as this user on this machine; install bubblewrap (apt-get install bubblewrap) for isolated sandboxes, or run a docker engine (the provider is then docker)")
	}
}

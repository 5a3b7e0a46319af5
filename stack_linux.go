package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"

	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

// newLocalProvider starts the local provider (package manage/local) on the
// state directory, with the isolation asked for.
func (o *serveOptions) newLocalProvider(ctx context.Context, log *slog.Logger) (sandboxProvider, error) {
	cfg := local.Config{StateDir: o.stateDir, Isolation: o.isolation, Disk: int64(o.disk), Logger: log}
	if o.sandboxIDs != "" {
		ids, err := local.ParseIDRange(o.sandboxIDs)
		if err != nil {
			return nil, fmt.Errorf("--sandbox-ids: %w", err)
		}
		cfg.SandboxIDs = ids
	}
	p, err := local.New(ctx, cfg)
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

// refuseUnisolatedHTTP is the error of a server about to serve HTTP with
// unisolated local sandboxes it did not ask for: --isolation auto that
// found no working bubblewrap. A remote principal must never get a sandbox
// that runs as the server's user on the host; over stdio the client is the
// machine's own user and the fallback stays, with its notice.
func refuseUnisolatedHTTP(p sandboxProvider, isolation string) error {
	lp, isLocal := p.(*local.Provider)
	if !isLocal || lp.Isolation() != local.IsolationNone || isolation == local.IsolationNone {
		return nil
	}
	return fmt.Errorf("refusing to serve HTTP with unisolated sandboxes: --isolation auto found no working bubblewrap (%s). "+
		"Fix one of: install bubblewrap (apt-get install bubblewrap; sandbox-mcp doctor says what else it needs), "+
		"use --provider docker, or pass --isolation none to serve remote principals unisolated sandboxes knowingly",
		lp.Capabilities().BwrapError)
}

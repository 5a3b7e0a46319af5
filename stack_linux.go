package main

import (
	"context"
	"log/slog"

	"github.com/sandbox-mcp/sandbox-mcp/manage/docker"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2b"
	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

// newProvider starts the provider --provider names: e2b (package
// manage/e2b) on E2B's API, docker (package manage/docker) on its engine,
// else the local provider (package
// manage/local) on the state directory, with the isolation asked for. On an
// error it returns a nil interface, never a typed nil.
func (o *serveOptions) newProvider(ctx context.Context, log *slog.Logger) (sandboxProvider, error) {
	if o.provider == e2b.Name {
		return o.newE2BProvider(ctx, log)
	}
	if o.provider == docker.Name {
		p, err := docker.New(ctx, docker.Config{StateDir: o.stateDir, Image: o.dockerImage, Host: o.dockerHost, Logger: log})
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	p, err := local.New(ctx, local.Config{StateDir: o.stateDir, Isolation: o.isolation, Logger: log})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// warnUnisolated logs loudly when the local provider runs without
// isolation (no usable bubblewrap).
func warnUnisolated(p sandboxProvider, log *slog.Logger) {
	if lp, isLocal := p.(*local.Provider); isLocal && lp.Isolation() == "none" {
		log.Warn("sandboxes run WITHOUT isolation: commands run as this user on this machine; install bubblewrap (apt-get install bubblewrap) for isolated sandboxes")
	}
}

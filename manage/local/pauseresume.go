//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"connectrpc.com/connect"
)

// Pause freezes every process of a running sandbox: with the cgroup freezer,
// waiting until the kernel reports it frozen, else with SIGSTOP through its
// process tree. Pausing a paused sandbox is a no-op; a stopped one is an
// error (FailedPrecondition), a gone one NotFound.
//
// A sandbox another Provider runs (or whose daemon outlived the Provider
// that started it) is paused through its recorded cgroup or process tree;
// one that recorded neither is Unavailable. Whether other servers still use
// the sandbox is for the caller to know: the Manager pauses a named
// workspace's sandbox only when no other server holds it.
func (p *Provider) Pause(ctx context.Context, id string) error {
	c, _, err := p.controlExisting(ctx, id)
	if err != nil {
		return err
	}
	defer c.release()
	if c.own == nil && !c.foreign {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s is stopped: nothing to pause", id))
	}
	cg, pid := p.procs(c)
	if c.foreign && !cg.hasFreezer() && pid == 0 {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("pause sandbox %s: another sandbox-mcp process runs it and did not record its processes", id))
	}
	if cg.hasFreezer() {
		if err := cg.setFrozen(ctx, true); err != nil {
			// Leave it running rather than half frozen.
			_ = cg.setFrozen(context.Background(), false)
			if ctx.Err() != nil {
				return ctxError("pause sandbox "+id, ctx.Err())
			}
			return connect.NewError(connect.CodeInternal, fmt.Errorf("pause sandbox %s: %w", id, err))
		}
		return nil
	}
	if pausedTree(pid) {
		return nil
	}
	if err := stopTree(ctx, pid); err != nil {
		continueTree(pid)
		if ctx.Err() != nil {
			return ctxError("pause sandbox "+id, err)
		}
		return connect.NewError(connect.CodeInternal, fmt.Errorf("pause sandbox %s: %w", id, err))
	}
	return nil
}

// Resume thaws a paused sandbox, or starts a new daemon for a stopped one on
// its existing files (its processes from before are gone); this Provider
// then runs it. Resuming a running sandbox is a no-op, whichever Provider
// runs it; a gone one is NotFound. Of several Providers resuming a stopped
// sandbox at once, one starts it and the others find it running.
func (p *Provider) Resume(ctx context.Context, id string) error {
	c, meta, err := p.controlExisting(ctx, id)
	if err != nil {
		return err
	}
	defer c.release()
	if c.own != nil || c.foreign {
		cg, pid := p.procs(c)
		// A cgroup that vanished belonged to a daemon that just died: the
		// sandbox is about to be stopped, and nothing in it is frozen.
		if cg.hasFreezer() {
			if err := cg.setFrozen(ctx, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
				if ctx.Err() != nil {
					return ctxError("resume sandbox "+id, ctx.Err())
				}
				return connect.NewError(connect.CodeInternal, fmt.Errorf("resume sandbox %s: %w", id, err))
			}
		}
		// Also after a freezer thaw: a Provider without cgroups may have
		// paused it with SIGSTOP.
		if pid != 0 && pausedTree(pid) {
			continueTree(pid)
		}
		return nil
	}
	if err := p.checkOpen(); err != nil {
		return err
	}
	spec, err := p.spec(meta.Config)
	if err != nil {
		return err
	}
	if p.hostIDs != nil {
		// What an earlier daemon left (frozen processes of a paused
		// sandbox whose server died) still runs as the sandbox's id:
		// gone first, so that the id is free for it again.
		if err := p.removeStaleCgroup(ctx, id); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("resume sandbox %s: %w", id, err))
		}
		uid, changed, err := p.hostIDs.ensure(ctx, id, c.dir)
		if err != nil {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("resume sandbox %s: %w", id, err))
		}
		spec.hostID = uid
		if changed {
			// A sandbox from before per-sandbox ids, or one whose id
			// was taken meanwhile: its files become its new id's.
			for _, sub := range sandboxSubdirs {
				if err := chownTree(subdirPath(c.dir, sub), uid, uid); err != nil {
					return connect.NewError(connect.CodeInternal, fmt.Errorf("resume sandbox %s: %w", id, err))
				}
			}
		}
	}
	if hasDisk(c.dir) {
		// Unmounted when its last daemon ended (or still mounted, when
		// its server died without cleaning up).
		if err := p.mountVolume(ctx, c.dir); err != nil {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("resume sandbox %s: %w", id, err))
		}
	}
	if err := p.prepareSubdirs(c.dir, p.ownerFor(spec)); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("resume sandbox %s: %w", id, err))
	}
	owner := c.owner
	c.owner = nil // the daemon keeps it
	d, err := p.startDaemon(ctx, id, c.dir, spec, owner)
	if err != nil {
		return err
	}
	return p.setDaemon(ctx, c.e, d)
}

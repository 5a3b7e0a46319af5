//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"connectrpc.com/connect"
)

// Kill stops a sandbox's processes and deletes its directory. Killing a gone
// sandbox is a no-op. A sandbox another Provider runs is killed through its
// cgroup and recorded pid; that Provider's waiter sees its daemon die and
// lets go of the sandbox. The directory is first renamed away, so the
// sandbox is gone at once; a large tree is deleted in the background if ctx
// ends first.
func (p *Provider) Kill(ctx context.Context, id string) error {
	c, err := p.control(ctx, id)
	if errors.Is(err, errSandboxGone) {
		// Its directory was deleted by hand: nothing can start it again,
		// so whatever is left in its cgroup is an orphan.
		_ = p.removeStaleCgroup(ctx, id)
		p.forget(id)
		return nil
	}
	if err != nil {
		return err
	}
	defer c.release()
	switch {
	case c.own != nil:
		if err := p.stopDaemon(ctx, c.own); err != nil {
			return err
		}
		if err := awaitRelease(ctx, c.own); err != nil {
			return ctxError("kill sandbox "+id, err)
		}
	case c.foreign:
		if err := p.killForeign(ctx, c); err != nil {
			return err
		}
	}
	if c.own != nil || c.owner != nil {
		// A cgroup left by an earlier server may still hold processes;
		// nobody else runs the sandbox now.
		_ = p.removeStaleCgroup(ctx, id)
	}
	trash := filepath.Join(p.sandboxesDir, trashDir)
	_ = os.Mkdir(trash, 0o700)
	doomed := filepath.Join(trash, id+"-"+randomSuffix())
	if err := os.Rename(c.dir, doomed); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			p.forget(id)
			return nil
		}
		return connect.NewError(connect.CodeInternal, fmt.Errorf("kill sandbox %s: %w", id, err))
	}
	p.forget(id)
	if p.hostIDs != nil {
		// Its processes are gone; any straggler keeps the id busy
		// (allocation skips ids that processes run as).
		p.hostIDs.release(ctx, id, doomed)
	}
	removed := make(chan error, 1)
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		removed <- removeSandboxDir(doomed)
	}()
	select {
	case err := <-removed:
		if err != nil {
			p.log.Warn("could not delete a killed sandbox's files", "id", id, "dir", doomed, "error", err)
		}
	case <-ctx.Done():
	}
	return nil
}

// killForeign kills the processes of a sandbox another Provider runs and
// waits (until ctx ends) for that Provider to let go of it. When neither its
// cgroup nor its daemon's pid is known, nothing can be killed from here and
// the sandbox is left alone.
func (p *Provider) killForeign(ctx context.Context, c *control) error {
	cg, pid := p.procs(c)
	if cg == nil && pid == 0 {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("kill sandbox %s: another sandbox-mcp process runs it and did not record its processes", c.id))
	}
	killProcs(cg, pid, c.rec.Isolation)
	owner, err := awaitOwnership(ctx, c.dir)
	switch {
	case err == nil:
		c.owner = owner
	case ctx.Err() != nil:
		// Its processes got SIGKILL; its owner cleans up after them.
		p.log.Warn("the process that ran a killed sandbox did not let go of it in time", "id", c.id, "owner_pid", c.rec.OwnerPID)
	case errors.Is(err, errSandboxGone):
	default:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("kill sandbox %s: %w", c.id, err))
	}
	return nil
}

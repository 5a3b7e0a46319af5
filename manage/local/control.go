//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/manage/filelock"
)

// control is a sandbox locked for a change of state: its entry lock and its
// op.lock are held, and it is known who runs it.
type control struct {
	id, dir string
	e       *entry
	op      *os.File
	// own is this Provider's live daemon of the sandbox.
	own *daemon
	// foreign is set when another Provider runs the sandbox; rec is what it
	// recorded (zero when it recorded nothing usable).
	foreign bool
	rec     daemonRecord
	// owner is the owner lock, held when nobody ran the sandbox.
	owner *os.File
}

// control locks sandbox id for a change of state, waiting (until ctx ends)
// for operations of this and other Providers on it. A sandbox whose
// directory does not exist is errSandboxGone. On success the caller must
// call release.
func (p *Provider) control(ctx context.Context, id string) (*control, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	e := p.entry(id)
	if err := e.acquire(ctx); err != nil {
		return nil, ctxError("sandbox "+id, err)
	}
	c := &control{id: id, dir: filepath.Join(p.sandboxesDir, id), e: e}
	ok := false
	defer func() {
		if !ok {
			c.release()
		}
	}()
	op, err := lockOp(ctx, c.dir, unix.LOCK_EX, true)
	switch {
	case errors.Is(err, errSandboxGone):
		if e.d != nil && e.d.alive() {
			p.log.Warn("sandbox directory removed while its daemon ran; killing it", "id", id)
			_ = p.stopDaemon(ctx, e.d)
		}
		return nil, errSandboxGone
	case ctx.Err() != nil:
		return nil, ctxError("sandbox "+id+" is busy in another process", ctx.Err())
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	c.op = op
	if e.d != nil && e.d.alive() {
		c.own, ok = e.d, true
		return c, nil
	}
	if err := awaitRelease(ctx, e.d); err != nil {
		return nil, ctxError("sandbox "+id, err)
	}
	running, err := settledOwnerRunning(ctx, c.dir)
	if ctx.Err() != nil {
		return nil, ctxError("sandbox "+id, ctx.Err())
	}
	var owner *os.File
	if err == nil && !running {
		owner, err = takeOwnership(c.dir)
	} else if err == nil {
		err = filelock.ErrLocked
	}
	switch {
	case err == nil:
		c.owner = owner
	case errors.Is(err, filelock.ErrLocked):
		c.foreign = true
		if rec, err := readRecord(c.dir); err == nil && rec.EndedAt.IsZero() {
			c.rec = rec
		}
	case errors.Is(err, errSandboxGone):
		return nil, errSandboxGone
	default:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	ok = true
	return c, nil
}

// controlExisting is control for an operation on an existing sandbox: one
// whose directory or sandbox.json is missing is NotFound. It also returns
// the sandbox's metadata. On success the caller must call release.
func (p *Provider) controlExisting(ctx context.Context, id string) (*control, metadata, error) {
	c, err := p.control(ctx, id)
	if errors.Is(err, errSandboxGone) {
		return nil, metadata{}, notFound(id)
	}
	if err != nil {
		return nil, metadata{}, err
	}
	meta, err := readMeta(c.dir)
	if err != nil {
		c.release()
		return nil, metadata{}, notFound(id)
	}
	return c, meta, nil
}

// release drops the locks control took.
func (c *control) release() {
	if c.owner != nil {
		_ = c.owner.Close()
	}
	if c.op != nil {
		_ = c.op.Close()
	}
	c.e.release()
}

// procs returns the cgroup and outermost pid (0 if unknown) of the running
// sandbox's processes.
func (p *Provider) procs(c *control) (*cgroup, int) {
	if c.own != nil {
		return c.own.cg, c.own.pid
	}
	return p.foreignCgroup(c.id, c.rec), c.rec.livePID()
}

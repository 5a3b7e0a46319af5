package manage

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// idlePause pauses a workspace that stayed idle.
func (m *Manager) idlePause(ws *workspace) {
	ws.mu.Lock()
	if ws.active > 0 || ws.flight != nil || ws.state != StateRunning || ws.sb == nil || ws.gone {
		ws.mu.Unlock()
		return
	}
	ws.idle = nil
	m.startFlight(ws, m.pauseTransition(false))
	ws.mu.Unlock()
}

// pauseTransition is pause run as a flight; leave also ends this Manager's
// hold on the workspace (see letGo). A pause never fails (see pause), so
// operations waiting for it carry on.
func (m *Manager) pauseTransition(leave bool) transition {
	return func(ws *workspace, _ *flight, epoch uint64) error {
		m.pause(ws, epoch, leave)
		return nil
	}
}

// pause freezes the published sandbox, unless another server holds the
// workspace (Options.Holders) or another server sharing the store was active
// on it recently (see lockForPause): then it may be running a call there,
// and the sandbox is left running for the last holder, or the last active
// server, to pause; with an idle pause, the idle clock then starts again for
// when that server's activity is old enough. The checks, the pause and, with
// leave, the end of this Manager's hold happen under the store's lock of the
// key, which a server joining the workspace takes to read its record: of two
// servers leaving at once, the second pauses. A sandbox the provider cannot
// pause, or whose record cannot be read, is left running and the failure
// logged: the workspace works either way.
func (m *Manager) pause(ws *workspace, epoch uint64, leave bool) {
	ws.mu.Lock()
	if ws.epoch != epoch || ws.sb == nil {
		ws.mu.Unlock()
		if leave {
			m.letGo(ws)
		}
		return
	}
	id, ownWrote := ws.sb.ID, ws.activeWrote
	ws.mu.Unlock()
	ctx, cancel := m.callCtx()
	defer cancel()
	unlock, err := m.lockForPause(ctx, ws.key, id, ownWrote)
	if err != nil {
		m.log.Info("not pausing the sandbox; leaving it running", "key", ws.key, "sandbox", id, "reason", err)
		if leave {
			m.letGo(ws)
		}
		m.idleAgain(ws, epoch, err)
		return
	}
	defer func() {
		// Still under the lock: a server leaving next sees this one gone.
		if leave {
			m.letGo(ws)
		}
		unlock()
	}()
	if m.othersHold(ws.key) {
		m.log.Info("another server uses the sandbox; leaving it running", "key", ws.key, "sandbox", id)
		if leave {
			m.forgetOwnActivity(ctx, ws.key, id)
		}
		return
	}
	if err := m.opts.Provider.Pause(ctx, id); err != nil {
		m.log.Warn("could not pause idle sandbox; leaving it running", "key", ws.key, "sandbox", id, "err", err)
		return
	}
	m.pauses.Add(1)
	ws.mu.Lock()
	if ws.epoch != epoch {
		// Reset or closed meanwhile: the sandbox paused is no longer this
		// workspace's.
		ws.mu.Unlock()
		return
	}
	ws.state = StatePaused
	rec := m.record(ws)
	ws.mu.Unlock()
	m.save(rec)
	m.log.Info("paused idle sandbox", "key", ws.key, "sandbox", id)
}

// idleAgain restarts ws's idle-pause clock after a pause was skipped for
// reason: until another server's activity is old enough, or a full idle
// pause when the store could not tell.
func (m *Manager) idleAgain(ws *workspace, epoch uint64, reason error) {
	if m.opts.IdlePause <= 0 {
		return
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return
	}
	wait := m.opts.IdlePause
	if se := (servedElsewhereError{}); errors.As(reason, &se) {
		wait = max(time.Until(se.until), time.Millisecond)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.epoch != epoch || ws.active > 0 || ws.gone || ws.sb == nil || ws.state != StateRunning {
		return
	}
	m.armIdleLocked(ws, wait)
}

// armIdleLocked (re)starts ws's idle-pause clock to pause it after wait.
// Called with ws.mu held.
func (m *Manager) armIdleLocked(ws *workspace, wait time.Duration) {
	ws.stopIdleLocked()
	ws.idle = time.AfterFunc(wait, func() { m.idlePause(ws) })
}

// Pause pauses key's sandbox now (as the idle timer would). It waits for any
// transition in flight; a sandbox with operations holding leases is left
// running (the idle timer pauses it once they are done), and so is one the
// provider fails to pause (the failure is logged) and one another server
// sharing the store is serving (see pause). It returns an error only
// when ctx ends first or this Manager has no workspace for key.
func (m *Manager) Pause(ctx context.Context, key string) error {
	ws := m.lookup(key)
	if ws == nil {
		return fmt.Errorf("workspace %q has no sandbox", key)
	}
	return m.pauseWorkspace(ctx, ws, false)
}

// pauseWorkspace is Pause; leave also ends this Manager's hold on the
// workspace, unless operations still hold leases on it.
func (m *Manager) pauseWorkspace(ctx context.Context, ws *workspace, leave bool) error {
	for {
		ws.mu.Lock()
		if f := ws.flight; f != nil {
			// A pause prevents a replacement in flight from being published.
			ws.epoch++
			ws.mu.Unlock()
			if err := f.wait(ctx); err != nil {
				return err
			}
			continue
		}
		// Leaving, a sandbox this Manager paused is paused again: another
		// server may have resumed it since, and left it running for this
		// one to pause.
		pausable := ws.state == StateRunning || (leave && ws.state == StatePaused)
		if ws.sb == nil || !pausable {
			ws.mu.Unlock()
			if leave {
				m.letGo(ws)
			}
			return nil
		}
		if ws.active > 0 {
			// In use (say, by a stateless HTTP client while a session of
			// the same workspace ends): never freeze a running call. The
			// idle timer pauses it after the last lease is released.
			ws.mu.Unlock()
			return nil
		}
		f := m.startFlight(ws, m.pauseTransition(leave))
		ws.mu.Unlock()
		return f.wait(ctx)
	}
}

// Reset destroys key's sandbox and creates a fresh one, returning the new
// generation. A replacement in flight is not published (and is destroyed).
func (m *Manager) Reset(ctx context.Context, key string, named bool) (int64, error) {
	ws, err := m.workspace(key, named)
	if err != nil {
		return 0, err
	}
	// Any transition in flight now discards (and destroys) what it makes:
	// every change a transition makes to the workspace is guarded by the
	// epoch it started in.
	ws.mu.Lock()
	ws.epoch++
	loaded := ws.loaded
	ws.loaded = true
	oldID := ""
	if ws.sb != nil {
		oldID = ws.sb.ID
	}
	gen := ws.gen
	ws.lost = nil
	f := m.startFlight(ws, func(ws *workspace, f *flight, epoch uint64) error {
		return m.reset(ws, f, epoch, oldID, gen, loaded)
	})
	ws.mu.Unlock()
	if err := f.wait(ctx); err != nil {
		return 0, err
	}
	if f.err != nil {
		return 0, f.err
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.gen, nil
}

// reset is Reset's transition: it kills oldID, the sandbox published at
// generation gen when the reset began, and creates generation gen+1. A
// workspace this process had not loaded may have a sandbox recorded by an
// earlier run: that one is killed instead, and its generations continue.
func (m *Manager) reset(ws *workspace, f *flight, epoch uint64, oldID string, gen int64, loaded bool) error {
	if !loaded {
		m.recoverStore()
		ctx, cancel := m.callCtx()
		rec, ok, err := m.store.Get(ctx, ws.key)
		cancel()
		if err != nil {
			return fmt.Errorf("workspace %q: reading the store: %w", ws.key, err)
		}
		if ok {
			gen = max(gen, rec.Generation)
			if m.hasOwnSandbox(rec) {
				oldID = rec.SandboxID
			}
		}
	}
	if oldID != "" {
		m.killQuietly(oldID)
	}
	ws.mu.Lock()
	if ws.epoch == epoch {
		ws.dropSandboxLocked()
	}
	ws.mu.Unlock()
	return m.create(ws, f, epoch, gen+1, EventReset, nil)
}

// EndSession applies the end-of-session policy to key: a named workspace's
// sandbox is paused (it survives) once no other server holds it, and this
// Manager lets go of it; an anonymous one is killed and forgotten. A
// replacement in flight is not published.
func (m *Manager) EndSession(ctx context.Context, key string) error {
	ws := m.lookup(key)
	if ws == nil {
		return nil
	}
	ws.mu.Lock()
	named := ws.named
	ws.mu.Unlock()
	if named {
		return m.pauseWorkspace(ctx, ws, true)
	}
	return m.destroy(ctx, ws)
}

// holdLocked makes this Manager a holder of the named workspace ws
// (Options.Holders), before it reads the workspace's record: a server that
// pauses the sandbox after that sees it. A failure is logged; the workspace
// works either way. Called with ws.mu held.
func (m *Manager) holdLocked(ws *workspace) {
	if !ws.named || ws.unhold != nil || m.opts.Holders == nil {
		return
	}
	release, err := m.opts.Holders.Hold(ws.key)
	if err != nil {
		m.log.Warn("could not register as a holder of the workspace; other servers may pause its sandbox", "key", ws.key, "err", err)
		return
	}
	ws.unhold = release
}

// letGo ends this Manager's hold on ws. What it knows of the sandbox may go
// stale once others may pause it, so the next operation reads the record
// again (once no lease is held).
func (m *Manager) letGo(ws *workspace) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.unhold == nil {
		return
	}
	ws.unhold()
	ws.unhold = nil
	if ws.active == 0 {
		ws.loaded = false
	}
}

// othersHold reports whether another server holds key; when that cannot be
// learned it says so, and the sandbox is left running.
func (m *Manager) othersHold(key string) bool {
	if m.opts.Holders == nil {
		return false
	}
	others, err := m.opts.Holders.Others(key)
	if err != nil {
		m.log.Warn("could not learn whether other servers hold the workspace; assuming they do", "key", key, "err", err)
		return true
	}
	return others
}

// destroy kills an anonymous workspace's sandbox and forgets the workspace.
func (m *Manager) destroy(ctx context.Context, ws *workspace) error {
	ws.mu.Lock()
	ws.epoch++
	ws.gone = true
	ws.stopIdleLocked()
	f := ws.flight
	ws.mu.Unlock()
	if f != nil {
		if err := f.wait(ctx); err != nil {
			return err
		}
	}
	ws.mu.Lock()
	sb, cli := ws.takeSandboxLocked()
	ws.mu.Unlock()
	if cli != nil {
		cli.Close()
	}
	var err error
	if sb != nil {
		kctx, cancel := m.callCtx()
		err = m.opts.Provider.Kill(kctx, sb.ID)
		cancel()
	}
	dctx, cancel := m.callCtx()
	if derr := m.store.Delete(dctx, ws.key); derr != nil && err == nil {
		err = derr
	}
	cancel()
	m.mu.Lock()
	if m.workspaces[ws.key] == ws {
		delete(m.workspaces, ws.key)
	}
	m.mu.Unlock()
	return err
}

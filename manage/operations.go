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
	m.startFlight(ws, m.pauseTransition)
	ws.mu.Unlock()
}

// pauseTransition is pause run as a flight. A pause never fails (see
// pause), so operations waiting for it carry on.
func (m *Manager) pauseTransition(ws *workspace, _ *flight, epoch uint64) error {
	m.pause(ws, epoch)
	return nil
}

// pause freezes the published sandbox. A sandbox the provider cannot pause
// is left running and the failure logged: the workspace works either way.
// So is one another server sharing the store was active on recently, or
// whose record cannot be read (see lockForPause); with an idle pause, the
// idle clock then starts again for when that server's activity is old
// enough.
func (m *Manager) pause(ws *workspace, epoch uint64) {
	ws.mu.Lock()
	if ws.epoch != epoch || ws.sb == nil {
		ws.mu.Unlock()
		return
	}
	id, ownWrote := ws.sb.ID, ws.activeWrote
	ws.mu.Unlock()
	ctx, cancel := m.callCtx()
	defer cancel()
	unlock, err := m.lockForPause(ctx, ws.key, id, ownWrote)
	if err != nil {
		m.log.Info("not pausing the sandbox; leaving it running", "key", ws.key, "sandbox", id, "reason", err)
		m.idleAgain(ws, epoch, err)
		return
	}
	defer unlock()
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
		if ws.sb == nil || ws.state != StateRunning {
			ws.mu.Unlock()
			return nil
		}
		if ws.active > 0 {
			// In use (say, by a stateless HTTP client while a session of
			// the same workspace ends): never freeze a running call. The
			// idle timer pauses it after the last lease is released.
			ws.mu.Unlock()
			return nil
		}
		f := m.startFlight(ws, m.pauseTransition)
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
// sandbox is paused (it survives), an anonymous one is killed and forgotten.
// A replacement in flight is not published.
func (m *Manager) EndSession(ctx context.Context, key string) error {
	ws := m.lookup(key)
	if ws == nil {
		return nil
	}
	ws.mu.Lock()
	named := ws.named
	ws.mu.Unlock()
	if named {
		return m.Pause(ctx, key)
	}
	return m.destroy(ctx, ws)
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

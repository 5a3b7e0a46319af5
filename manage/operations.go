package manage

import (
	"context"
	"fmt"
)

// idlePause pauses a workspace that stayed idle.
func (m *Manager) idlePause(ws *workspace) {
	ws.mu.Lock()
	if ws.active > 0 || ws.flight != nil || ws.state != StateRunning || ws.sb == nil || ws.gone {
		ws.mu.Unlock()
		return
	}
	ws.idle = nil
	m.startFlight(ws, m.pause)
	ws.mu.Unlock()
}

// pause freezes the published sandbox.
func (m *Manager) pause(ws *workspace, f *flight, epoch uint64) error {
	ws.mu.Lock()
	if ws.epoch != epoch || ws.sb == nil {
		ws.mu.Unlock()
		return nil
	}
	id := ws.sb.ID
	ws.mu.Unlock()
	ctx, cancel := m.callCtx()
	defer cancel()
	if err := m.opts.Provider.Pause(ctx, id); err != nil {
		m.log.Warn("could not pause idle sandbox; leaving it running", "key", ws.key, "sandbox", id, "err", err)
		return nil
	}
	m.pauses.Add(1)
	ws.mu.Lock()
	if ws.epoch != epoch {
		// Reset or closed meanwhile: the sandbox paused is no longer this
		// workspace's.
		ws.mu.Unlock()
		return nil
	}
	ws.state = StatePaused
	rec := m.record(ws)
	ws.mu.Unlock()
	m.save(rec)
	m.log.Info("paused idle sandbox", "key", ws.key, "sandbox", id)
	return nil
}

// Pause pauses key's sandbox now (as the idle timer would). It waits for any
// transition in flight; a sandbox with operations holding leases is left
// running (the idle timer pauses it once they are done).
func (m *Manager) Pause(ctx context.Context, key string) error {
	m.mu.Lock()
	ws := m.workspaces[key]
	m.mu.Unlock()
	if ws == nil {
		return fmt.Errorf("workspace %q has no sandbox", key)
	}
	for {
		ws.mu.Lock()
		if f := ws.flight; f != nil {
			// A pause prevents a replacement in flight from being published.
			ws.epoch++
			ws.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return ctx.Err()
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
		f := m.startFlight(ws, m.pause)
		ws.mu.Unlock()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
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
	old := ws.sb
	gen := ws.gen
	ws.lost = nil
	f := m.startFlight(ws, func(ws *workspace, f *flight, epoch uint64) error {
		oldID := ""
		if old != nil {
			oldID = old.ID
		}
		if !loaded {
			// A workspace this process has not used yet may have a sandbox
			// recorded by an earlier run: reset that one, and continue its
			// generations.
			ctx, cancel := m.callCtx()
			rec, ok, err := m.store.Get(ctx, ws.key)
			cancel()
			if err != nil {
				return fmt.Errorf("workspace %q: reading the store: %w", ws.key, err)
			}
			if ok {
				gen = max(gen, rec.Generation)
				if rec.Provider == m.opts.Provider.Name() && rec.SandboxID != "" {
					oldID = rec.SandboxID
				}
			}
		}
		if oldID != "" {
			m.killQuietly(oldID)
		}
		ws.mu.Lock()
		if ws.epoch == epoch {
			ws.sb, ws.state = nil, ""
			if ws.cli != nil {
				ws.cli.Close()
				ws.cli = nil
			}
		}
		ws.mu.Unlock()
		return m.create(ws, f, epoch, gen+1, EventReset, nil)
	})
	ws.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if f.err != nil {
		return 0, f.err
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.gen, nil
}

// EndSession applies the end-of-session policy to key: a named workspace's
// sandbox is paused (it survives), an anonymous one is killed and forgotten.
// A replacement in flight is not published.
func (m *Manager) EndSession(ctx context.Context, key string) error {
	m.mu.Lock()
	ws := m.workspaces[key]
	m.mu.Unlock()
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
	if ws.idle != nil {
		ws.idle.Stop()
	}
	f := ws.flight
	ws.mu.Unlock()
	if f != nil {
		select {
		case <-f.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ws.mu.Lock()
	sb, cli := ws.sb, ws.cli
	ws.sb, ws.cli = nil, nil
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

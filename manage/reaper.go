package manage

import (
	"context"
	"time"
)

// reaper kills sandboxes paused (or stopped) for longer than PausedTTL.
func (m *Manager) reaper() {
	defer close(m.reaperDone)
	every := min(m.opts.PausedTTL/2, time.Minute)
	every = max(every, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stopReaper:
			return
		case <-t.C:
			m.Reap(context.Background())
		}
	}
}

// Reap kills this provider's sandboxes that have been paused or stopped for
// longer than PausedTTL, now. Their workspaces report the loss on next use.
// It returns how many it killed. First it pauses orphans (see pauseOrphans),
// whose TTL then starts.
func (m *Manager) Reap(ctx context.Context) int {
	if m.opts.PausedTTL <= 0 {
		return 0
	}
	m.recoverStore()
	lctx, cancel := m.callCtx()
	recs, err := m.store.List(lctx)
	cancel()
	if err != nil {
		m.log.Warn("reaper could not list workspaces", "err", err)
		return 0
	}
	m.pauseOrphans(recs)
	n := 0
	cutoff := time.Now().Add(-m.opts.PausedTTL)
	for _, rec := range recs {
		if !m.pausedBefore(rec, cutoff) {
			continue
		}
		var err error
		if ws := m.lookup(rec.Key); ws == nil {
			err = m.reap(rec)
		} else {
			f := m.startReap(ws, rec, &err)
			if f == nil {
				continue
			}
			if f.wait(ctx) != nil {
				return n
			}
		}
		if err != nil {
			m.log.Warn("reaper could not reap sandbox", "sandbox", rec.SandboxID, "err", err)
			continue
		}
		m.reaped.Add(1)
		n++
		m.log.Info("reaped sandbox paused longer than the TTL", "key", rec.Key, "sandbox", rec.SandboxID, "ttl", m.opts.PausedTTL)
	}
	return n
}

// pausedBefore reports whether rec is a sandbox of this provider that is
// paused or stopped, and has been since before cutoff.
func (m *Manager) pausedBefore(rec Record, cutoff time.Time) bool {
	if !m.hasOwnSandbox(rec) || rec.PausedAt.IsZero() || rec.PausedAt.After(cutoff) {
		return false
	}
	return rec.State == StatePaused || rec.State == StateStopped
}

// startReap reaps rec's sandbox as ws's transition, so an operation
// arriving meanwhile waits for it and then learns of the loss (the
// workspace reloads from the store). The reap's error is left in *reapErr
// once the flight is done; the flight itself never fails, since a failed
// reap is the reaper's to log, not the next operation's error. startReap
// returns nil, reaping nothing, while ws is in use, in transition or
// running. Called without ws.mu held.
func (m *Manager) startReap(ws *workspace, rec Record, reapErr *error) *flight {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.active > 0 || ws.flight != nil || ws.state == StateRunning {
		return nil
	}
	ws.epoch++
	return m.startFlight(ws, func(ws *workspace, _ *flight, epoch uint64) error {
		*reapErr = m.reap(rec)
		ws.mu.Lock()
		if ws.epoch == epoch {
			ws.loaded = false // reload from the store: the loss is reported then
			ws.dropSandboxLocked()
		}
		ws.mu.Unlock()
		return nil
	})
}

// reap kills a sandbox paused past the TTL and records it: a named
// workspace keeps its record, marked gone, so its next call hears of the
// loss; an anonymous one is forgotten.
func (m *Manager) reap(rec Record) error {
	ctx, cancel := m.callCtx()
	defer cancel()
	if err := m.opts.Provider.Kill(ctx, rec.SandboxID); err != nil {
		return err
	}
	rec.State = StateGone
	rec.UpdatedAt = time.Now().UTC()
	if rec.Named {
		return m.store.Put(ctx, rec)
	}
	return m.store.Delete(ctx, rec.Key)
}

// pauseOrphans pauses the sandboxes of named workspaces recorded as running
// that no server holds (Options.Holders) any more: their last server ended
// without pausing them (killed, say), and they would otherwise run until a
// server uses the workspace again. Each is checked and paused under the
// key's store lock, as a leaving server's pause is (see pause). Without
// Holders nothing is known of other servers and nothing is paused.
func (m *Manager) pauseOrphans(recs []Record) {
	if m.opts.Holders == nil {
		return
	}
	for _, rec := range recs {
		if !rec.Named || rec.State != StateRunning || !m.hasOwnSandbox(rec) || m.usesWorkspace(rec.Key) {
			continue
		}
		m.pauseOrphan(rec.Key)
	}
}

// usesWorkspace reports whether this Manager holds key or has it in use.
func (m *Manager) usesWorkspace(key string) bool {
	ws := m.lookup(key)
	if ws == nil {
		return false
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.unhold != nil || ws.active > 0 || ws.flight != nil || ws.loaded
}

// pauseOrphan pauses key's sandbox, recorded as running, unless a server
// holds the workspace.
func (m *Manager) pauseOrphan(key string) {
	ctx, cancel := m.callCtx()
	defer cancel()
	_, unlock, err := m.store.Lock(ctx, key)
	if err != nil {
		return
	}
	defer unlock()
	rec, ok, err := m.store.Get(ctx, key)
	if err != nil || !ok || rec.State != StateRunning || !m.hasOwnSandbox(rec) || m.othersHold(key) {
		return
	}
	if err := m.opts.Provider.Pause(ctx, rec.SandboxID); err != nil {
		m.log.Warn("could not pause a sandbox no server holds", "key", key, "sandbox", rec.SandboxID, "err", err)
		return
	}
	now := time.Now().UTC()
	rec.State, rec.PausedAt, rec.UpdatedAt = StatePaused, now, now
	if err := m.store.Put(ctx, rec); err != nil {
		m.log.Error("could not record workspace in the store", "key", key, "sandbox", rec.SandboxID, "err", err)
	}
	m.pauses.Add(1)
	m.log.Info("paused a sandbox no server holds any more", "key", key, "sandbox", rec.SandboxID)
}

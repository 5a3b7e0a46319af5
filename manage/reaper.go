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
// It returns how many it killed.
func (m *Manager) Reap(ctx context.Context) int {
	if m.opts.PausedTTL <= 0 {
		return 0
	}
	lctx, cancel := m.callCtx()
	recs, err := m.store.List(lctx)
	cancel()
	if err != nil {
		m.log.Warn("reaper could not list workspaces", "err", err)
		return 0
	}
	n := 0
	cutoff := time.Now().Add(-m.opts.PausedTTL)
	for _, rec := range recs {
		if rec.Provider != m.opts.Provider.Name() || rec.SandboxID == "" || rec.PausedAt.IsZero() || rec.PausedAt.After(cutoff) {
			continue
		}
		if rec.State != StatePaused && rec.State != StateStopped {
			continue
		}
		m.mu.Lock()
		ws := m.workspaces[rec.Key]
		m.mu.Unlock()
		var err error
		if ws == nil {
			err = m.reap(rec)
		} else {
			// Reap as the workspace's transition, so an operation arriving
			// meanwhile waits for it and then learns of the loss.
			ws.mu.Lock()
			if ws.active > 0 || ws.flight != nil || ws.state == StateRunning {
				ws.mu.Unlock()
				continue
			}
			ws.epoch++
			f := m.startFlight(ws, func(ws *workspace, _ *flight, epoch uint64) error {
				err = m.reap(rec)
				ws.mu.Lock()
				if ws.epoch == epoch {
					ws.loaded = false // reload from the store: the loss is reported then
					ws.sb, ws.state = nil, ""
					if ws.cli != nil {
						ws.cli.Close()
						ws.cli = nil
					}
				}
				ws.mu.Unlock()
				return nil // a failed reap is the reaper's to log, not the next caller's error
			})
			ws.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
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

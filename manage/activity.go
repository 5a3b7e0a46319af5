package manage

import (
	"context"
	"fmt"
	"time"
)

// Servers sharing a store (replicas) each see only the calls they serve.
// So that one does not pause a sandbox another is serving, every server
// records its activity in the workspace's record (Record.LastActive), and
// reads the record again under the store's lock before it pauses: a sandbox
// another server was active on within quietAfter is left running. A call
// that comes after this server was quiet for an activity interval reads the
// record too (touch), so a sandbox another server paused (or replaced)
// meanwhile is resumed (or reloaded) before anything is sent to it.

// DefaultActivityInterval is how often activity is recorded when the idle
// pause is off.
const DefaultActivityInterval = time.Minute

// activityInterval is how often a server records its activity: at most
// once per interval on calls, and every interval while a call is in
// progress: Options.ActivityInterval.
func (m *Manager) activityInterval() time.Duration {
	switch {
	case m.opts.ActivityInterval > 0:
		return m.opts.ActivityInterval
	case m.opts.IdlePause > 0:
		return m.opts.IdlePause / 4
	}
	return DefaultActivityInterval
}

// quietAfter is how long after another server's recorded activity its
// sandbox may be paused: the idle pause (at least an interval) plus one
// interval, since recorded activity lags the last call by up to one.
func (m *Manager) quietAfter() time.Duration {
	i := m.activityInterval()
	return max(m.opts.IdlePause, i) + i
}

// noteActivity records, under key's store lock, that this server runs a
// call on sandbox id (generation gen) at time at, when the record still
// names that sandbox, running. It returns the record it read (ok false:
// none).
func (m *Manager) noteActivity(key, id string, gen int64, at time.Time) (rec Record, ok bool, err error) {
	ctx, cancel := m.callCtx()
	defer cancel()
	_, unlock, err := m.store.Lock(ctx, key)
	if err != nil {
		return Record{}, false, err
	}
	defer unlock()
	rec, ok, err = m.store.Get(ctx, key)
	if err != nil || !ok || rec.SandboxID != id || rec.Generation != gen || rec.State != StateRunning {
		return rec, ok, err
	}
	rec.LastActive, rec.ActiveBy, rec.UpdatedAt = at, m.instance, at
	return rec, true, m.store.Put(ctx, rec)
}

// markActiveLocked notes now as the time this server last recorded
// activity on ws's sandbox and returns what noteActivity needs; running is
// false (and nothing is noted) when ws has no running sandbox. Called with
// ws.mu held.
func markActiveLocked(ws *workspace) (id string, gen int64, now time.Time, running bool) {
	if ws.sb == nil || ws.state != StateRunning {
		return "", 0, time.Time{}, false
	}
	now = time.Now().UTC()
	ws.activeWrote = now
	return ws.sb.ID, ws.gen, now, true
}

// touch is the transition of a call on a running sandbox after this server
// was quiet for an activity interval: it records the activity and takes
// the record's word on what happened meanwhile. A sandbox another server
// paused is resumed next; one another server replaced is reloaded from the
// store. A store that cannot answer changes nothing (the call goes ahead on
// the sandbox this server holds).
func (m *Manager) touch(ws *workspace, _ *flight, epoch uint64) error {
	ws.mu.Lock()
	if ws.epoch != epoch {
		ws.mu.Unlock()
		return nil
	}
	id, gen, now, running := markActiveLocked(ws)
	ws.mu.Unlock()
	if !running {
		return nil
	}
	rec, ok, err := m.noteActivity(ws.key, id, gen, now)
	if err != nil {
		m.log.Warn("could not record activity in the store", "key", ws.key, "sandbox", id, "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.epoch != epoch || ws.sb == nil || ws.sb.ID != id || ws.gen != gen {
		return nil
	}
	switch {
	case rec.SandboxID == id && rec.Generation == gen && (rec.State == StatePaused || rec.State == StateStopped):
		m.log.Info("sandbox was paused by another server; resuming it", "key", ws.key, "sandbox", id, "state", rec.State)
		ws.state = rec.State
	case rec.Generation > gen || (rec.Generation == gen && (rec.SandboxID != id || rec.State == StateGone)):
		m.log.Info("the store records another sandbox (or none) for the workspace; reloading it", "key", ws.key, "sandbox", id, "recorded", rec.SandboxID, "generation", rec.Generation)
		ws.loaded = false
		ws.dropSandboxLocked()
	}
	return nil
}

// startActivityLocked starts the loop that records activity every interval
// while leases on ws are held, so a long call counts as activity for the
// other servers. Release stops it when the last lease ends. Called with
// ws.mu held.
func (m *Manager) startActivityLocked(ws *workspace) {
	if ws.activity != nil {
		return
	}
	stop := make(chan struct{})
	ws.activity = stop
	interval := m.activityInterval()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			ws.mu.Lock()
			id, gen, now, running := markActiveLocked(ws)
			ws.mu.Unlock()
			if !running {
				continue
			}
			if _, _, err := m.noteActivity(ws.key, id, gen, now); err != nil {
				m.log.Warn("could not record activity in the store", "key", ws.key, "sandbox", id, "err", err)
			}
		}
	}()
}

// servedElsewhereError is why a pause was skipped: another server was active
// on the sandbox recently.
type servedElsewhereError struct{ until time.Time }

func (e servedElsewhereError) Error() string {
	return fmt.Sprintf("another server was active on the sandbox; it may be paused from %s", e.until.Format(time.RFC3339))
}

// lockForPause takes key's store lock before a pause of sandbox id and
// reads the record: when another server recorded activity on that sandbox
// (later than ours, ownWrote) within quietAfter, it releases the lock and
// returns servedElsewhereError. Otherwise the caller pauses, records and then
// calls unlock, so no server records activity in between.
func (m *Manager) lockForPause(ctx context.Context, key, id string, ownWrote time.Time) (unlock func(), err error) {
	_, unlock, err = m.store.Lock(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("taking the store lock: %w", err)
	}
	rec, ok, err := m.store.Get(ctx, key)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("reading the store: %w", err)
	}
	if ok && rec.SandboxID == id && rec.LastActive.After(ownWrote) {
		if until := rec.LastActive.Add(m.quietAfter()); time.Now().Before(until) {
			unlock()
			return nil, servedElsewhereError{until: until}
		}
	}
	return unlock, nil
}

// forgetOwnActivity clears the record's LastActive when this server wrote it
// last, as it leaves key without pausing (other servers hold it): what it
// did says nothing of whether the others still use the sandbox. Called
// with key's store lock held; a failure is logged.
func (m *Manager) forgetOwnActivity(ctx context.Context, key, id string) {
	rec, ok, err := m.store.Get(ctx, key)
	if err != nil || !ok || rec.SandboxID != id || rec.ActiveBy != m.instance {
		return
	}
	rec.LastActive, rec.ActiveBy = time.Time{}, ""
	if err := m.store.Put(ctx, rec); err != nil {
		m.log.Warn("could not clear this server's activity in the store", "key", key, "sandbox", id, "err", err)
	}
}

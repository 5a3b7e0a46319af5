package manage

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// DamageReporter is implemented by stores that, finding their file damaged,
// move it aside and start an empty one (package manage/boltstore). The
// Manager then rebuilds the records from the provider's sandboxes, so a
// damaged file never makes workspaces silently forget their sandboxes.
type DamageReporter interface {
	// Damages counts the damaged files this store replaced since it was
	// opened.
	Damages() uint64
}

// RebuildMarker is implemented by damage-reporting stores that keep a
// replaced file's damage known across restarts until the records are
// rebuilt (boltstore): a server that dies mid-rebuild leaves the next one
// to rebuild again, and meanwhile its reapers do not take an empty store
// for the truth. The Manager calls MarkRebuilt once a rebuild recorded
// every workspace it could attribute.
type RebuildMarker interface {
	MarkRebuilt() error
}

// Rediscoverer is implemented by providers that can tell, for each of their
// sandboxes, the workspace it was made for (the local provider keeps that in
// each sandbox's directory).
type Rediscoverer interface {
	// Rediscover lists the provider's sandboxes with their workspaces. An
	// entry with an empty Key could not be attributed.
	Rediscover(ctx context.Context) ([]Rediscovered, error)
}

// Rediscovered is one sandbox found by Rediscover.
type Rediscovered struct {
	// Sandbox is the sandbox as Info describes it.
	Sandbox Sandbox
	// Key is the workspace key it was made for ("" when unknown), Named
	// whether that workspace survives sessions, Generation the generation
	// it was made as.
	Key        string
	Named      bool
	Generation int64
}

// KeepNewestGeneration clears the Key of every entry of found whose key
// has a newer entry (a higher generation, or the same one created later):
// only the newest is the workspace's, the others are orphans a Rediscoverer
// leaves in place, unattributed. It returns the orphans as they were, for
// the caller to log.
func KeepNewestGeneration(found []Rediscovered) []Rediscovered {
	var orphans []Rediscovered
	newest := map[string]int{}
	for i, r := range found {
		if r.Key == "" {
			continue
		}
		j, ok := newest[r.Key]
		if !ok {
			newest[r.Key] = i
			continue
		}
		old := i
		if o := found[j]; r.Generation > o.Generation || r.Generation == o.Generation && r.Sandbox.CreatedAt.After(o.Sandbox.CreatedAt) {
			newest[r.Key], old = i, j
		}
		orphans = append(orphans, found[old])
		found[old].Key = ""
	}
	return orphans
}

// recoverStore rebuilds the store's records from the provider's sandboxes
// when the store replaced a damaged file since the last rebuild. It is
// cheap when nothing was damaged, and runs before an operation first
// consults the store for a workspace (load), so that operation already sees
// the rebuilt record. Workspaces this process has loaded are recorded
// again from memory; others from what the provider says; sandboxes that
// cannot be attributed are left in place and logged.
func (m *Manager) recoverStore() {
	dr, ok := m.store.(DamageReporter)
	if !ok {
		return
	}
	if dr.Damages() == m.damagesSeen.Load() {
		return
	}
	m.recoverMu.Lock()
	defer m.recoverMu.Unlock()
	seen := dr.Damages()
	if seen == m.damagesSeen.Load() {
		return
	}
	defer m.damagesSeen.Store(seen)
	rd, ok := m.opts.Provider.(Rediscoverer)
	m.storeDamaged.Store(true)
	if !ok {
		m.log.Error("the store file was damaged and replaced; this provider cannot tell which workspace each sandbox belongs to, so recorded workspaces are forgotten (their sandboxes are untouched)", "provider", m.opts.Provider.Name())
		m.markRebuilt() // nothing more can be rebuilt later either
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.CreateTimeout)
	defer cancel()
	found, err := rd.Rediscover(ctx)
	if err != nil {
		m.log.Error("the store file was damaged and replaced, and listing the sandboxes to rebuild it failed; recorded workspaces are forgotten (their sandboxes are untouched)", "err", err)
		return
	}
	// The newest sandbox of a key is its own (the highest generation, the
	// later made on a tie, as KeepNewestGeneration picks); older ones (a
	// kill that never finished) are orphans.
	slices.SortFunc(found, func(a, b Rediscovered) int {
		if c := cmp.Compare(b.Generation, a.Generation); c != 0 {
			return c
		}
		return b.Sandbox.CreatedAt.Compare(a.Sandbox.CreatedAt)
	})
	done := map[string]bool{}
	recovered, failed := 0, 0
	for _, r := range found {
		switch {
		case r.Key == "" || done[r.Key] && r.Sandbox.State != StateGone:
			m.log.Warn("sandbox found while rebuilding the damaged store cannot be attributed to a workspace; left in place", "sandbox", r.Sandbox.ID, "state", r.Sandbox.State, "key", r.Key)
			continue
		case r.Sandbox.State == StateGone:
			continue
		}
		done[r.Key] = true
		if ws := m.lookup(r.Key); ws != nil {
			ws.mu.Lock()
			live := ws.loaded && ws.sb != nil && ws.sb.ID == r.Sandbox.ID
			rec := m.record(ws)
			ws.mu.Unlock()
			if live {
				m.save(rec) // this process knows it best, and it is not affected
				continue
			}
		}
		if _, ok, err := m.store.Get(ctx, r.Key); err != nil || ok {
			continue // recorded again meanwhile (by another server sharing the store)
		}
		now := time.Now().UTC()
		rec := Record{Key: r.Key, Provider: m.opts.Provider.Name(), SandboxID: r.Sandbox.ID, Generation: max(r.Generation, 1), State: r.Sandbox.State,
			Named: r.Named, CreatedAt: r.Sandbox.CreatedAt, UpdatedAt: now, Recovered: true}
		if rec.State != StateRunning {
			rec.PausedAt = now
		}
		if err := m.store.Put(ctx, rec); err != nil {
			m.log.Error("could not record a recovered workspace in the rebuilt store", "key", r.Key, "sandbox", r.Sandbox.ID, "err", err)
			failed++
			continue
		}
		recovered++
	}
	m.log.Warn("rebuilt the damaged store from the provider's sandboxes", "recovered_workspaces", recovered, "sandboxes_found", len(found), "failed", failed)
	if failed == 0 {
		m.markRebuilt()
	}
}

// markRebuilt tells a RebuildMarker store that its rebuild is done.
func (m *Manager) markRebuilt() {
	if rm, ok := m.store.(RebuildMarker); ok {
		if err := rm.MarkRebuilt(); err != nil {
			m.log.Warn("could not record that the store was rebuilt; the next start rebuilds it again", "err", err)
		}
	}
}

// unrecoveredEvent returns, once per workspace, the event that tells a
// named workspace without a record, first loaded after this process found
// the store damaged, that no sandbox of it was found (its files, if it had
// any, are lost).
func (m *Manager) unrecoveredEvent(key string) (Event, bool) {
	if !m.storeDamaged.Load() {
		return Event{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.toldUnrecovered[key] {
		return Event{}, false
	}
	m.toldUnrecovered[key] = true
	return Event{Kind: EventStoreRebuilt}, true
}

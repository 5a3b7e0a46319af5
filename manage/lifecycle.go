package manage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// A workspace changes only through transitions: one at a time, each run as
// the workspace's flight that operations wait for. A transition runs
// without ws.mu held, and every change it makes to the workspace is guarded
// by the epoch it started in: a reset, pause, reap or close bumps the
// epoch, and a transition that finds it changed publishes nothing (and
// destroys what it made).

// transition is one lifecycle step, run as a flight; epoch is the
// workspace's epoch when it started. Events it appends to f reach the
// operations waiting for it.
type transition func(ws *workspace, f *flight, epoch uint64) error

// flight is one lifecycle transition in progress; operations wait for it.
type flight struct {
	done   chan struct{}
	err    error
	events []Event
}

// errSuperseded ends a transition whose workspace was reset, paused or
// closed meanwhile; operations waiting for it wait for the next one instead.
var errSuperseded = errors.New("superseded by a newer change to the workspace")

// changedWhile is the error of a transition that found its workspace
// changed while it was doing something ("loading", "resuming").
func changedWhile(key, doing string) error {
	return fmt.Errorf("workspace %q changed while %s: %w", key, doing, errSuperseded)
}

// supersededCreation is what a creation returns when its workspace changed
// before it could publish: the loss it was replacing, marked as not
// replaced, or errSuperseded.
func supersededCreation(key string, lost *LostError) error {
	if lost != nil {
		lost.ReplaceErr = errors.New("the workspace was reset, paused or closed while the replacement was being made")
		return lost
	}
	return fmt.Errorf("workspace %q was reset or closed while its sandbox was being created: %w", key, errSuperseded)
}

// startFlight runs fn as the workspace's transition. Called with ws.mu held.
func (m *Manager) startFlight(ws *workspace, fn transition) *flight {
	f := &flight{done: make(chan struct{})}
	ws.flight = f
	epoch := ws.epoch
	go func() {
		err := fn(ws, f, epoch)
		ws.mu.Lock()
		f.err = err
		if ws.flight == f {
			ws.flight = nil
		}
		ws.mu.Unlock()
		close(f.done)
	}()
	return f
}

// wait waits until the flight is done, or returns ctx.Err() when ctx ends
// first.
func (f *flight) wait(ctx context.Context) error {
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// load consults the store for a workspace this process has not seen: a
// recorded sandbox is reattached (resumed or restarted when needed); a
// recorded sandbox that is gone is replaced and reported lost; with no record
// a sandbox is created.
func (m *Manager) load(ws *workspace, f *flight, epoch uint64) error {
	m.recoverStore()
	ctx, cancel := m.callCtx()
	defer cancel()
	// Under the key's lock: a server pausing the sandbox (see pause) does
	// so before this reads the record or leaves it running.
	// Another server may hold it while it creates the sandbox.
	lockCtx, cancelLock := context.WithTimeout(context.Background(), m.opts.CreateTimeout)
	_, unlock, err := m.store.Lock(lockCtx, ws.key)
	cancelLock()
	if err != nil {
		return fmt.Errorf("workspace %q: taking its lock: %w", ws.key, err)
	}
	rec, ok, err := m.store.Get(ctx, ws.key)
	unlock()
	if err != nil {
		return fmt.Errorf("workspace %q: reading the store: %w", ws.key, err)
	}
	if !ok {
		ws.mu.Lock()
		named := ws.named
		if ws.epoch == epoch {
			ws.loaded = true
		}
		ws.mu.Unlock()
		if named {
			if ev, tell := m.unrecoveredEvent(ws.key); tell {
				f.events = append(f.events, ev)
			}
		}
		return m.create(ws, f, epoch, 1, EventCreated, nil)
	}

	prov := m.opts.Provider
	if !m.hasOwnSandbox(rec) || rec.State == StateGone {
		detail := "recorded as gone"
		if rec.Provider != prov.Name() {
			detail = fmt.Sprintf("it was made by the %s provider, and this server runs %s", rec.Provider, prov.Name())
		}
		return m.replaceLost(ws, f, epoch, rec.Generation, Sandbox{State: StateGone, Detail: detail}, nil, true)
	}
	info, err := prov.Info(ctx, rec.SandboxID)
	if err != nil {
		// Inconclusive: never create a second sandbox for a key whose
		// sandbox may still exist.
		return fmt.Errorf("workspace %q: cannot learn the state of its sandbox %s: %w", ws.key, rec.SandboxID, err)
	}
	switch info.State {
	case StateGone:
		return m.replaceLost(ws, f, epoch, rec.Generation, info, nil, true)
	case StateRunning, StatePaused, StateStopped:
		if rec.Recovered {
			f.events = append(f.events, Event{Kind: EventStoreRebuilt, Generation: rec.Generation, FilesKept: true})
		}
		ws.mu.Lock()
		if ws.epoch != epoch {
			ws.mu.Unlock()
			return changedWhile(ws.key, "loading")
		}
		ws.loaded = true
		ws.gen = rec.Generation
		sb := info
		ws.sb = &sb
		ws.state = info.State
		ws.mu.Unlock()
		if info.State == StateRunning {
			return m.connect(ws, epoch)
		}
		return m.resume(ws, f, epoch)
	}
	return fmt.Errorf("workspace %q: provider reported unknown state %q for sandbox %s", ws.key, info.State, rec.SandboxID)
}

// connect makes the envd client for the published sandbox.
func (m *Manager) connect(ws *workspace, epoch uint64) error {
	ws.mu.Lock()
	if ws.epoch != epoch || ws.sb == nil {
		ws.mu.Unlock()
		return changedWhile(ws.key, "connecting")
	}
	id := ws.sb.ID
	ws.mu.Unlock()
	ctx, cancel := m.callCtx()
	defer cancel()
	ep, err := m.opts.Provider.Endpoint(ctx, id)
	if err != nil {
		return fmt.Errorf("workspace %q: reaching sandbox %s: %w", ws.key, id, err)
	}
	cli, err := m.newClient(ep)
	if err != nil {
		return err
	}
	ws.mu.Lock()
	if ws.epoch != epoch {
		ws.mu.Unlock()
		cli.Close()
		return changedWhile(ws.key, "connecting")
	}
	ws.setClientLocked(cli)
	rec := m.record(ws)
	ws.mu.Unlock()
	m.save(rec)
	return nil
}

// newClient makes an envd client for ep, with the Manager's ClientOptions.
func (m *Manager) newClient(ep Endpoint) (*envdclient.Client, error) {
	opts := []envdclient.Option{}
	if ep.AccessToken != "" {
		opts = append(opts, envdclient.WithAccessToken(ep.AccessToken))
	}
	if ep.RoutingID != "" {
		opts = append(opts, envdclient.WithSandboxRouting(ep.RoutingID, ep.RoutingPort))
	}
	if ep.User != "" {
		opts = append(opts, envdclient.WithUser(ep.User))
	}
	if ep.EnvdVersion != "" {
		opts = append(opts, envdclient.WithEnvdVersion(ep.EnvdVersion))
	}
	opts = append(opts, ep.ClientOptions...)
	opts = append(opts, m.opts.ClientOptions...)
	return envdclient.New(ep.URL, opts...)
}

// create makes a new sandbox and publishes it as generation gen. The
// store's creation lock makes sure two replicas never create two sandboxes
// for one key: under it the store is read again (a sandbox another replica
// made meanwhile is adopted), and a sandbox made is recorded before the lock
// is released. A lock the store loses while creating (see Store.Lock)
// cancels the provider's Create; a sandbox made under a lost lock is killed,
// never recorded or published, and the operation fails (the next one tries
// again, and adopts what a replica that took the lock made). kind is the
// event delivered to waiting operations; lost, when set, is returned (the
// caller's operation is reported lost).
func (m *Manager) create(ws *workspace, f *flight, epoch uint64, gen int64, kind EventKind, lost *LostError) error {
	lockCtx, cancelLock := context.WithTimeout(context.Background(), m.opts.CreateTimeout)
	defer cancelLock()
	held, unlock, err := m.store.Lock(lockCtx, ws.key)
	if err != nil {
		return fmt.Errorf("workspace %q: taking the creation lock: %w", ws.key, err)
	}
	defer unlock()
	ws.mu.Lock()
	superseded, named := ws.epoch != epoch, ws.named
	ws.mu.Unlock()
	if superseded {
		return supersededCreation(ws.key, lost)
	}
	sb, recGen, prev, err := m.madeMeanwhile(ws.key, gen)
	if err != nil {
		return err
	}
	if sb != nil {
		// Another server sharing the store made this workspace's sandbox
		// while we waited for the lock: use it, make no second one.
		return m.publish(ws, f, epoch, *sb, recGen, kind, lost, false)
	}
	cfg := m.opts.Template
	cfg.Key, cfg.Named, cfg.Generation = ws.key, named, gen
	ctx, cancel := context.WithTimeout(held, m.opts.CreateTimeout)
	defer cancel()
	var made Sandbox
	release, err := m.slots.admit(ctx, m, ws.key)
	if err == nil {
		defer release()
		made, err = m.opts.Provider.Create(ctx, cfg)
		if err == nil {
			err = m.recordCreated(held, ws, made, gen)
		} else if lerr := lockLost(held); lerr != nil {
			err = fmt.Errorf("%w (the provider's creation was cancelled: %v)", lerr, err)
		}
	}
	if err != nil {
		var limit *LimitError
		if errors.As(err, &limit) {
			err = limitError(limit)
		}
		if lost != nil {
			// The next operation tries again to create one.
			lost.ReplaceErr = err
			ws.mu.Lock()
			if ws.epoch == epoch {
				ws.loaded = true
				ws.dropSandboxLocked()
			}
			ws.mu.Unlock()
			return lost
		}
		if limit != nil {
			return err
		}
		return fmt.Errorf("workspace %q: creating a sandbox with the %s provider: %w", ws.key, m.opts.Provider.Name(), err)
	}
	m.creations.Add(1)
	if made.WorkspaceKept {
		if lost != nil {
			lost.FilesKept, lost.OnlyWorkspaceKept = true, true
		}
		// A rebuilt store that found no sandbox of the workspace: the new
		// one still has the workspace's files (a volume the provider kept).
		for i := range f.events {
			if ev := &f.events[i]; ev.Kind == EventStoreRebuilt && !ev.FilesKept {
				ev.OnlyWorkspaceKept = true
			}
		}
	}
	err = m.publish(ws, f, epoch, made, gen, kind, lost, true)
	ws.mu.Lock()
	discarded := ws.sb == nil || ws.sb.ID != made.ID
	ws.mu.Unlock()
	if discarded {
		// publish destroyed it (the workspace changed meanwhile): put back
		// the record it replaced.
		m.restoreRecord(ws.key, prev)
	}
	return err
}

// restoreRecord puts prev back as key's record (none when prev is nil),
// logging a failure.
func (m *Manager) restoreRecord(key string, prev *Record) {
	ctx, cancel := m.callCtx()
	defer cancel()
	var err error
	if prev != nil {
		err = m.store.Put(ctx, *prev)
	} else {
		err = m.store.Delete(ctx, key)
	}
	if err != nil {
		m.log.Error("could not restore the workspace's record after discarding a sandbox", "key", key, "err", err)
	}
}

// recordCreated writes the record of sb, just made as generation gen, while
// the creation lock is held, so that a replica taking the lock next adopts
// it. When the lock was lost (held is done) or the record cannot be written,
// sb is killed and the error returned: a sandbox no replica can find would
// be made twice.
func (m *Manager) recordCreated(held context.Context, ws *workspace, sb Sandbox, gen int64) error {
	err := lockLost(held)
	if err == nil {
		ws.mu.Lock()
		rec := Record{Key: ws.key, Provider: m.opts.Provider.Name(), SandboxID: sb.ID, Generation: gen, State: StateRunning, Named: ws.named, CreatedAt: sb.CreatedAt, UpdatedAt: time.Now().UTC()}
		ws.mu.Unlock()
		ctx, cancel := m.callCtx()
		defer cancel()
		if perr := m.store.Put(ctx, rec); perr != nil {
			err = fmt.Errorf("recording the new sandbox in the store: %w", perr)
		}
	}
	if err != nil {
		m.log.Error("destroying a sandbox just made: it could not be recorded under the creation lock", "key", ws.key, "sandbox", sb.ID, "err", err)
		m.killQuietly(sb.ID)
		return fmt.Errorf("%w (the sandbox made, %s, was destroyed; try again)", err, sb.ID)
	}
	return nil
}

// lockLost returns the loss of a creation lock whose held context is done
// other than by unlock, or nil while it is held.
func lockLost(held context.Context) error {
	if held.Err() == nil {
		return nil
	}
	cause := context.Cause(held)
	if errors.Is(cause, ErrLockLost) {
		return cause
	}
	return fmt.Errorf("%w: %v", ErrLockLost, cause)
}

// madeMeanwhile reads key's record under the creation lock and returns, as
// sb, a live sandbox of this provider that it records at generation gen or
// later: one another server (sharing the store) made after this one decided
// to create generation gen. A paused or stopped one is resumed (a stopped
// one gets the next generation). prev is the record read (nil when there is
// none). An error (the store or the provider cannot tell) means no sandbox
// may be created now: one may exist.
func (m *Manager) madeMeanwhile(key string, gen int64) (sb *Sandbox, recGen int64, prev *Record, err error) {
	ctx, cancel := m.callCtx()
	defer cancel()
	rec, ok, err := m.store.Get(ctx, key)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("workspace %q: reading the store under the creation lock: %w", key, err)
	}
	if !ok {
		return nil, 0, nil, nil
	}
	prev = &rec
	if !m.hasOwnSandbox(rec) || rec.State == StateGone || rec.Generation < gen {
		return nil, 0, prev, nil
	}
	info, err := m.opts.Provider.Info(ctx, rec.SandboxID)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("workspace %q: cannot learn the state of sandbox %s, recorded by another server: %w", key, rec.SandboxID, err)
	}
	if info.State.Terminal() {
		return nil, 0, prev, nil
	}
	recGen = rec.Generation
	if info.State != StateRunning {
		if err := m.opts.Provider.Resume(ctx, rec.SandboxID); err != nil {
			return nil, 0, nil, fmt.Errorf("workspace %q: resuming sandbox %s, recorded by another server: %w", key, rec.SandboxID, err)
		}
		if info.State == StateStopped {
			recGen++
		}
		info.State = StateRunning
	}
	return &info, recGen, prev, nil
}

// publish makes sb the workspace's sandbox unless the workspace changed
// (reset, close, pause) since the transition started, in which case sb is
// destroyed instead when this transition made it (own).
func (m *Manager) publish(ws *workspace, f *flight, epoch uint64, sb Sandbox, gen int64, kind EventKind, lost *LostError, own bool) error {
	ctx, cancel := m.callCtx()
	defer cancel()
	ep, err := m.opts.Provider.Endpoint(ctx, sb.ID)
	var cli *envdclient.Client
	if err == nil {
		cli, err = m.newClient(ep)
	}
	ws.mu.Lock()
	if ws.epoch != epoch || ws.gone {
		ws.mu.Unlock()
		if cli != nil {
			cli.Close()
		}
		if own {
			m.log.Info("discarding a sandbox made for a workspace that changed meanwhile", "key", ws.key, "sandbox", sb.ID)
			m.killQuietly(sb.ID)
		}
		return supersededCreation(ws.key, lost)
	}
	if err != nil {
		ws.mu.Unlock()
		if own {
			m.killQuietly(sb.ID)
		}
		return fmt.Errorf("workspace %q: reaching sandbox %s: %w", ws.key, sb.ID, err)
	}
	prev := ws.gen
	ws.setClientLocked(cli)
	ws.loaded = true
	ws.gen = gen
	ws.sb = &sb
	ws.state = StateRunning
	ws.lost = nil
	ev := Event{Kind: kind, PrevGeneration: prev, Generation: gen}
	if lost != nil {
		lost.Generation, lost.Replaced = gen, true
		ev.State, ev.Detail, ev.FilesKept, ev.OnlyWorkspaceKept = lost.State, lost.Detail, lost.FilesKept, lost.OnlyWorkspaceKept
		cp := *lost
		ws.lastLoss = &cp
	}
	f.events = append(f.events, ev)
	rec := m.record(ws)
	ws.mu.Unlock()
	m.save(rec)
	m.log.Info("sandbox ready", "key", ws.key, "sandbox", sb.ID, "generation", gen, "event", kind.String(), "isolation", sb.Isolation)
	if lost != nil {
		return lost
	}
	return nil
}

// resume brings a paused or stopped published sandbox back. A stopped
// sandbox comes back with new processes, so it gets a new generation and
// handles from before are refused.
func (m *Manager) resume(ws *workspace, f *flight, epoch uint64) error {
	ws.mu.Lock()
	if ws.epoch != epoch || ws.sb == nil {
		ws.mu.Unlock()
		return changedWhile(ws.key, "resuming")
	}
	id, state, gen := ws.sb.ID, ws.state, ws.gen
	ws.mu.Unlock()
	ctx, cancel := m.callCtx()
	defer cancel()
	if err := m.opts.Provider.Resume(ctx, id); err != nil {
		info, ierr := m.opts.Provider.Info(ctx, id)
		switch {
		case ierr == nil && info.State.Terminal():
			return m.replaceLost(ws, f, epoch, gen, info, err, true)
		case ierr == nil && info.State == StateRunning && state == StatePaused:
			// Resumed meanwhile by another server sharing the store.
			m.log.Info("sandbox already running (resumed by another server)", "key", ws.key, "sandbox", id, "resume_err", err)
		default:
			return fmt.Errorf("workspace %q: resuming sandbox %s: %w", ws.key, id, err)
		}
	}
	m.resumes.Add(1)
	ws.mu.Lock()
	if ws.epoch != epoch {
		ws.mu.Unlock()
		return changedWhile(ws.key, "resuming")
	}
	ws.state = StateRunning
	ev := Event{Kind: EventResumed, PrevGeneration: gen, Generation: gen, FilesKept: true}
	if state == StateStopped {
		ws.gen = gen + 1
		ev.Kind, ev.Generation = EventRestarted, ws.gen
	}
	f.events = append(f.events, ev)
	if ws.cli == nil || state == StateStopped {
		ws.mu.Unlock()
		return m.connect(ws, epoch)
	}
	rec := m.record(ws)
	ws.mu.Unlock()
	m.save(rec)
	return nil
}

package manage

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// Lease is an operation's hold on a workspace's sandbox, bound to one
// generation. Release it when the operation ends (the idle-pause clock
// starts when the last lease is released).
type Lease struct {
	// Key is the workspace key.
	Key string
	// Generation is the sandbox generation this lease is bound to; handles
	// made under it carry it.
	Generation int64
	// Sandbox describes the sandbox.
	Sandbox Sandbox
	// Client reaches the sandbox's envd.
	Client *envdclient.Client
	// Events are lifecycle happenings since this workspace's previous
	// operation that the agent should hear about (resumed, restarted, …).
	Events []Event

	m        *Manager
	ws       *workspace
	acquired time.Time
	released atomic.Bool
}

// Acquire returns a lease on key's sandbox, creating it on first use,
// resuming it when paused, and waiting for any transition in flight.
// Concurrent first calls share one creation. named marks a workspace that
// survives sessions (paused, not killed, when its session ends).
//
// A sandbox found lost before anything is sent yields a *LostError with
// NotRun set (and, with AutoRecreate, a published replacement).
func (m *Manager) Acquire(ctx context.Context, key string, named bool) (*Lease, error) {
	ws, err := m.workspace(key, named)
	if err != nil {
		return nil, err
	}
	var events []Event
	touched := false
	for {
		ws.mu.Lock()
		if ws.gone {
			ws.mu.Unlock()
			return nil, fmt.Errorf("workspace %q was closed", key)
		}
		m.holdLocked(ws)
		f := ws.flight
		if f == nil {
			if ws.lost != nil {
				le := *ws.lost
				le.NotRun, le.Cause = true, nil
				ws.mu.Unlock()
				return nil, &le
			}
			next := m.nextTransition(ws)
			if next == nil && !touched && time.Since(ws.activeWrote) >= m.activityInterval() {
				// Quiet for an interval: record the activity and learn
				// what other servers did meanwhile (once per Acquire).
				next, touched = m.touch, true
			}
			if next == nil {
				l := m.leaseLocked(ws, events)
				ws.mu.Unlock()
				return l, nil
			}
			// Wait for this very flight: one that ends before the lock is
			// taken again still reports its error and its events.
			f = m.startFlight(ws, next)
		}
		ws.mu.Unlock()
		if err := f.wait(ctx); err != nil {
			return nil, err
		}
		events = append(events, f.events...)
		if f.err != nil && !errors.Is(f.err, errSuperseded) {
			return nil, f.err
		}
	}
}

// nextTransition returns the transition that brings ws's sandbox to where it
// can be leased (loaded, created, resumed, reached), or nil when it is there.
// Called with ws.mu held.
func (m *Manager) nextTransition(ws *workspace) transition {
	switch {
	case !ws.loaded:
		return m.load
	case ws.sb == nil:
		gen := ws.gen + 1
		return func(ws *workspace, f *flight, epoch uint64) error {
			return m.create(ws, f, epoch, gen, EventCreated, nil)
		}
	case ws.state == StatePaused || ws.state == StateStopped:
		return m.resume
	case ws.cli == nil:
		// Published but not reachable yet (reaching it failed once).
		return func(ws *workspace, _ *flight, epoch uint64) error { return m.connect(ws, epoch) }
	}
	return nil
}

// leaseLocked hands out a lease on ws's published, reachable sandbox, with
// events and, on a generation's first lease, its unisolated warning. It
// stops the idle-pause clock. Called with ws.mu held.
func (m *Manager) leaseLocked(ws *workspace, events []Event) *Lease {
	ws.active++
	ws.stopIdleLocked()
	if ws.active == 1 {
		m.startKeepAliveLocked(ws)
		m.startActivityLocked(ws)
	}
	sb := *ws.sb
	sb.State = ws.state
	l := &Lease{Key: ws.key, Generation: ws.gen, Sandbox: sb, Client: ws.cli, m: m, ws: ws, acquired: time.Now()}
	if len(ws.sb.Warnings) > 0 && ws.warned != ws.gen {
		ws.warned = ws.gen
		events = append(events, Event{Kind: EventUnisolated, Generation: ws.gen, Warnings: ws.sb.Warnings})
	}
	l.Events = events
	return l
}

// Check turns err, the failure of an operation made under this lease, into a
// *LostError when the sandbox is confirmed lost, and otherwise returns err
// unchanged. An error that could mean a loss triggers one Info check; only a
// gone or stopped state counts, and an inconclusive check returns err.
// Concurrent failures of one generation share one check and one
// replacement. The operation is never replayed. When ctx ends while the
// check or a replacement is under way, Check returns err as it is (the
// replacement still completes for the next operation).
func (l *Lease) Check(ctx context.Context, err error) error {
	if err == nil || !envdclient.IsPossibleLoss(err) {
		return err
	}
	m, ws := l.m, l.ws
	for {
		ws.mu.Lock()
		if ws.gen != l.Generation {
			// Already replaced by someone else's check: same loss.
			if ws.lastLoss != nil && ws.lastLoss.PrevGeneration == l.Generation {
				le := ws.lastLoss.forOperation(err, l.acquired)
				ws.mu.Unlock()
				return le
			}
			ws.mu.Unlock()
			return err
		}
		if f := ws.flight; f != nil {
			ws.mu.Unlock()
			if f.wait(ctx) != nil {
				return err
			}
			continue
		}
		if ws.lost != nil && ws.lost.PrevGeneration == l.Generation {
			le := ws.lost.forOperation(err, l.acquired)
			ws.mu.Unlock()
			return le
		}
		var result error
		f := m.startFlight(ws, m.confirmLoss(l, err, &result))
		ws.mu.Unlock()
		if f.wait(ctx) != nil {
			return err
		}
		if result != nil {
			return result
		}
		// Not confirmed: if another flight replaced the sandbox meanwhile,
		// the loop reports that; otherwise the original error stands.
		ws.mu.Lock()
		same := ws.gen == l.Generation
		ws.mu.Unlock()
		if same {
			return err
		}
	}
}

// Release ends the lease. When no lease is left, the idle-pause clock
// starts. Releasing twice is a no-op.
func (l *Lease) Release() {
	if l == nil || !l.released.CompareAndSwap(false, true) {
		return
	}
	ws := l.ws
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.active--
	if ws.active > 0 {
		return
	}
	if ws.keepAlive != nil {
		close(ws.keepAlive)
		ws.keepAlive = nil
	}
	if ws.activity != nil {
		close(ws.activity)
		ws.activity = nil
	}
	if l.m.opts.IdlePause > 0 && ws.state == StateRunning && ws.sb != nil {
		l.m.armIdleLocked(ws, l.m.opts.IdlePause)
	}
}

// Generation returns key's current generation (0 when it has no sandbox).
func (m *Manager) Generation(key string) int64 {
	ws := m.lookup(key)
	if ws == nil {
		return 0
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.gen
}

// CheckHandle returns a *StaleError when a handle made under generation gen
// is used after key's sandbox was replaced (a later generation serves the
// workspace now). A generation this process has not reached yet (say, a
// handle from before a server restart) is for the caller to check against
// its lease.
func (m *Manager) CheckHandle(key, handle string, gen int64) error {
	if cur := m.Generation(key); gen < cur {
		return &StaleError{Handle: handle, HandleGeneration: gen, Generation: cur}
	}
	return nil
}

// startKeepAliveLocked starts the loop that keeps ws's sandbox alive while
// leases on it are held, when the provider is a KeepAliver. Release stops
// it when the last lease ends. Called with ws.mu held.
func (m *Manager) startKeepAliveLocked(ws *workspace) {
	ka, ok := m.opts.Provider.(KeepAliver)
	if !ok || ws.keepAlive != nil {
		return
	}
	stop := make(chan struct{})
	ws.keepAlive = stop
	interval := ka.KeepAliveInterval()
	go func() {
		for {
			m.keepAlive(ws, ka, interval)
			if interval <= 0 {
				return
			}
			t := time.NewTimer(interval)
			select {
			case <-stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
}

// keepAlive calls KeepAlive for ws's running sandbox unless it was called
// for that sandbox less than interval ago.
func (m *Manager) keepAlive(ws *workspace, ka KeepAliver, interval time.Duration) {
	ws.mu.Lock()
	if ws.sb == nil || ws.state != StateRunning ||
		(ws.keptAliveID == ws.sb.ID && interval > 0 && time.Since(ws.keptAliveTime) < interval) {
		ws.mu.Unlock()
		return
	}
	id := ws.sb.ID
	ws.keptAliveID, ws.keptAliveTime = id, time.Now()
	ws.mu.Unlock()
	ctx, cancel := m.callCtx()
	defer cancel()
	if err := ka.KeepAlive(ctx, id); err != nil {
		m.log.Warn("could not extend the sandbox's time to live", "key", ws.key, "sandbox", id, "err", err)
	}
}

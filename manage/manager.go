package manage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/client"
)

// Defaults for Options fields left zero.
const (
	// DefaultCallTimeout bounds Info, Endpoint, Pause, Resume and Kill.
	DefaultCallTimeout = 30 * time.Second
	// DefaultCreateTimeout bounds Create.
	DefaultCreateTimeout = 2 * time.Minute
)

// Options configures a Manager. Provider is required.
type Options struct {
	// Provider makes the sandboxes.
	Provider Provider
	// Store remembers workspaces across restarts. Nil means a MemoryStore.
	Store Store
	// Template is the config every sandbox is created with (Key and Named
	// are filled in per workspace).
	Template SandboxConfig
	// AutoRecreate replaces a lost sandbox (the failed operation is still
	// reported, never replayed). When false a lost workspace stays lost
	// until Reset.
	AutoRecreate bool
	// IdlePause pauses a sandbox after this long without an operation; 0
	// never pauses.
	IdlePause time.Duration
	// PausedTTL kills sandboxes paused (or stopped) for longer than this; 0
	// keeps them forever.
	PausedTTL time.Duration
	// CallTimeout bounds each lifecycle call to the provider other than
	// Create. Default DefaultCallTimeout.
	CallTimeout time.Duration
	// CreateTimeout bounds Create. Default DefaultCreateTimeout.
	CreateTimeout time.Duration
	// ClientOptions are added to every envd client the Manager makes.
	ClientOptions []client.Option
	// Logger receives lifecycle logs. Nil means slog.Default().
	Logger *slog.Logger
}

// EventKind names something that happened to a workspace's sandbox while an
// operation was acquiring it.
type EventKind int

// The events a Lease can carry.
const (
	// EventCreated: the workspace's first sandbox was created.
	EventCreated EventKind = iota + 1
	// EventResumed: a paused sandbox was resumed; processes kept running.
	EventResumed
	// EventRestarted: a stopped sandbox was started again with a new
	// daemon; files are kept, processes from before are gone.
	EventRestarted
	// EventRecreated: the sandbox was replaced after a loss, before this
	// operation (which runs in the replacement).
	EventRecreated
	// EventReset: the sandbox was destroyed and a fresh one created on
	// request (workspace_reset).
	EventReset
	// EventUnisolated: the first operation on a sandbox nothing isolates.
	EventUnisolated
)

func (k EventKind) String() string {
	switch k {
	case EventCreated:
		return "created"
	case EventResumed:
		return "resumed"
	case EventRestarted:
		return "restarted"
	case EventRecreated:
		return "recreated"
	case EventReset:
		return "reset"
	case EventUnisolated:
		return "unisolated"
	}
	return "unknown"
}

// Event is one lifecycle happening, for the tools to turn into a notice.
type Event struct {
	Kind           EventKind
	PrevGeneration int64
	Generation     int64
	// State and Detail describe the previous sandbox for EventRecreated.
	State  State
	Detail string
	// FilesKept is true for a recreation that kept the files.
	FilesKept bool
	// Warnings are the sandbox's warnings (EventUnisolated).
	Warnings []string
}

// Stats are counters for metrics.
type Stats struct {
	// Workspaces counts workspaces by their sandbox's state.
	Workspaces map[State]int
	// Creations, Recreations, Pauses, Resumes, Reaped count events since
	// the Manager started.
	Creations, Recreations, Pauses, Resumes, Reaped int64
}

// Manager maps workspace keys to sandboxes. Each key has at most one live
// sandbox; it is created on first use, and shared by concurrent operations.
// It is safe for concurrent use.
type Manager struct {
	opts  Options
	log   *slog.Logger
	store Store

	mu         sync.Mutex
	workspaces map[string]*workspace
	closed     bool

	stopReaper chan struct{}
	reaperDone chan struct{}

	creations, recreations, pauses, resumes, reaped atomic.Int64
}

// New returns a Manager. It starts the reaper when PausedTTL is set.
func New(opts Options) (*Manager, error) {
	if opts.Provider == nil {
		return nil, errors.New("manage: a provider is required")
	}
	if opts.Store == nil {
		opts.Store = NewMemoryStore()
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.CreateTimeout <= 0 {
		opts.CreateTimeout = DefaultCreateTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Manager{
		opts:       opts,
		log:        opts.Logger,
		store:      opts.Store,
		workspaces: map[string]*workspace{},
		stopReaper: make(chan struct{}),
		reaperDone: make(chan struct{}),
	}
	if opts.PausedTTL > 0 {
		go m.reaper()
	} else {
		close(m.reaperDone)
	}
	return m, nil
}

// Provider returns the Manager's provider.
func (m *Manager) Provider() Provider { return m.opts.Provider }

// workspace is the Manager's state for one key.
type workspace struct {
	key   string
	named bool

	mu       sync.Mutex
	loaded   bool  // the store was consulted
	gen      int64 // current generation (0: none yet)
	sb       *Sandbox
	cli      *client.Client
	state    State // of the published sandbox
	flight   *flight
	epoch    uint64 // bumped by reset, close and pause: in-flight replacements are then discarded
	active   int    // leases not yet released
	idle     *time.Timer
	warned   int64      // generation whose unisolated warning was delivered
	lastLoss *LostError // the most recent recreation, for late reporters of the same loss
	lost     *LostError // set when the sandbox is lost and not replaced (AutoRecreate off)
	gone     bool       // the workspace ended (session closed)
}

// errSuperseded ends a transition whose workspace was reset, paused or
// closed meanwhile; operations waiting for it wait for the next one instead.
var errSuperseded = errors.New("superseded by a newer change to the workspace")

// flight is one lifecycle transition in progress; operations wait for it.
type flight struct {
	done   chan struct{}
	err    error
	events []Event
}

func (m *Manager) workspace(key string, named bool) (*workspace, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	ws, ok := m.workspaces[key]
	if !ok {
		ws = &workspace{key: key, named: named}
		m.workspaces[key] = ws
	}
	if named {
		ws.mu.Lock()
		ws.named = true
		ws.mu.Unlock()
	}
	return ws, nil
}

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
	Client *client.Client
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
	for {
		ws.mu.Lock()
		if ws.gone {
			ws.mu.Unlock()
			return nil, fmt.Errorf("workspace %q was closed", key)
		}
		if f := ws.flight; f != nil {
			ws.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			events = append(events, f.events...)
			if f.err != nil && !errors.Is(f.err, errSuperseded) {
				return nil, f.err
			}
			continue
		}
		switch {
		case ws.lost != nil:
			le := *ws.lost
			le.NotRun, le.Cause = true, nil
			ws.mu.Unlock()
			return nil, &le
		case !ws.loaded:
			m.startFlight(ws, m.load)
		case ws.sb == nil:
			m.startFlight(ws, func(ws *workspace, f *flight, epoch uint64) error {
				return m.create(ws, f, epoch, ws.gen+1, EventCreated, nil)
			})
		case ws.state == StatePaused || ws.state == StateStopped:
			m.startFlight(ws, m.resume)
		case ws.cli == nil:
			// Published but not reachable yet (reaching it failed once).
			m.startFlight(ws, func(ws *workspace, _ *flight, epoch uint64) error { return m.connect(ws, epoch) })
		default:
			ws.active++
			if ws.idle != nil {
				ws.idle.Stop()
				ws.idle = nil
			}
			sb := *ws.sb
			sb.State = ws.state
			l := &Lease{Key: key, Generation: ws.gen, Sandbox: sb, Client: ws.cli, m: m, ws: ws, acquired: time.Now()}
			if len(ws.sb.Warnings) > 0 && ws.warned != ws.gen {
				ws.warned = ws.gen
				events = append(events, Event{Kind: EventUnisolated, Generation: ws.gen, Warnings: ws.sb.Warnings})
			}
			ws.mu.Unlock()
			l.Events = events
			return l, nil
		}
		ws.mu.Unlock()
	}
}

// startFlight runs fn as the workspace's transition. Called with ws.mu held.
func (m *Manager) startFlight(ws *workspace, fn func(ws *workspace, f *flight, epoch uint64) error) *flight {
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

func (m *Manager) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), m.opts.CallTimeout)
}

// load consults the store for a workspace this process has not seen: a
// recorded sandbox is reattached (resumed or restarted when needed); a
// recorded sandbox that is gone is replaced and reported lost; with no record
// a sandbox is created.
func (m *Manager) load(ws *workspace, f *flight, epoch uint64) error {
	ctx, cancel := m.callCtx()
	defer cancel()
	rec, ok, err := m.store.Get(ctx, ws.key)
	if err != nil {
		return fmt.Errorf("workspace %q: reading the store: %w", ws.key, err)
	}
	if !ok {
		ws.mu.Lock()
		if ws.epoch == epoch {
			ws.loaded = true
		}
		ws.mu.Unlock()
		return m.create(ws, f, epoch, 1, EventCreated, nil)
	}
	prov := m.opts.Provider
	if rec.Provider != prov.Name() || rec.State == StateGone || rec.SandboxID == "" {
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
		ws.mu.Lock()
		if ws.epoch != epoch {
			ws.mu.Unlock()
			return fmt.Errorf("workspace %q changed while loading: %w", ws.key, errSuperseded)
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
		return fmt.Errorf("workspace %q changed while connecting: %w", ws.key, errSuperseded)
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
		return fmt.Errorf("workspace %q changed while connecting: %w", ws.key, errSuperseded)
	}
	if ws.cli != nil {
		ws.cli.Close()
	}
	ws.cli = cli
	rec := m.record(ws)
	ws.mu.Unlock()
	m.save(rec)
	return nil
}

func (m *Manager) newClient(ep Endpoint) (*client.Client, error) {
	opts := []client.Option{}
	if ep.AccessToken != "" {
		opts = append(opts, client.WithAccessToken(ep.AccessToken))
	}
	if ep.RoutingID != "" {
		opts = append(opts, client.WithSandboxRouting(ep.RoutingID, ep.RoutingPort))
	}
	if ep.User != "" {
		opts = append(opts, client.WithUser(ep.User))
	}
	if ep.EnvdVersion != "" {
		opts = append(opts, client.WithEnvdVersion(ep.EnvdVersion))
	}
	opts = append(opts, m.opts.ClientOptions...)
	return client.New(ep.URL, opts...)
}

// record is the workspace's store record. Called with ws.mu held; the
// write (m.save) happens after ws.mu is released, so store I/O never holds
// up the workspace's other operations.
func (m *Manager) record(ws *workspace) Record {
	now := time.Now().UTC()
	rec := Record{Key: ws.key, Provider: m.opts.Provider.Name(), Generation: ws.gen, State: ws.state, Named: ws.named, UpdatedAt: now}
	if ws.sb != nil {
		rec.SandboxID = ws.sb.ID
		rec.CreatedAt = ws.sb.CreatedAt
	}
	if ws.state == StatePaused || ws.state == StateStopped {
		rec.PausedAt = now
	}
	return rec
}

// save writes rec to the store. The sandbox works either way; a failure to
// remember it is logged loudly, not returned.
func (m *Manager) save(rec Record) {
	ctx, cancel := m.callCtx()
	defer cancel()
	if err := m.store.Put(ctx, rec); err != nil {
		m.log.Error("could not record workspace in the store", "key", rec.Key, "sandbox", rec.SandboxID, "err", err)
	}
}

// create makes a new sandbox and publishes it as generation gen. The
// store's creation lock makes sure two replicas never create two sandboxes
// for one key. kind is the event delivered to waiting operations; lost,
// when set, is returned (the caller's operation is reported lost).
func (m *Manager) create(ws *workspace, f *flight, epoch uint64, gen int64, kind EventKind, lost *LostError) error {
	lockCtx, cancelLock := context.WithTimeout(context.Background(), m.opts.CreateTimeout)
	defer cancelLock()
	unlock, err := m.store.Lock(lockCtx, ws.key)
	if err != nil {
		return fmt.Errorf("workspace %q: taking the creation lock: %w", ws.key, err)
	}
	defer unlock()
	ws.mu.Lock()
	superseded, named := ws.epoch != epoch, ws.named
	ws.mu.Unlock()
	if superseded {
		if lost != nil {
			lost.ReplaceErr = errors.New("the workspace was reset, paused or closed while the replacement was being made")
			return lost
		}
		return fmt.Errorf("workspace %q was reset or closed while its sandbox was being created: %w", ws.key, errSuperseded)
	}
	if sb, recGen, ok := m.madeMeanwhile(ws.key, gen); ok {
		// Another server sharing the store made this workspace's sandbox
		// while we waited for the lock: use it, make no second one.
		return m.publish(ws, f, epoch, sb, recGen, kind, lost, false)
	}
	cfg := m.opts.Template
	cfg.Key, cfg.Named = ws.key, named
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.CreateTimeout)
	defer cancel()
	sb, err := m.opts.Provider.Create(ctx, cfg)
	if err != nil {
		if lost != nil {
			// The next operation tries again to create one.
			lost.ReplaceErr = err
			ws.mu.Lock()
			if ws.epoch == epoch {
				ws.loaded = true
				ws.sb, ws.state = nil, ""
				if ws.cli != nil {
					ws.cli.Close()
					ws.cli = nil
				}
			}
			ws.mu.Unlock()
			return lost
		}
		return fmt.Errorf("workspace %q: creating a sandbox with the %s provider: %w", ws.key, m.opts.Provider.Name(), err)
	}
	m.creations.Add(1)
	return m.publish(ws, f, epoch, sb, gen, kind, lost, true)
}

// madeMeanwhile reports a live sandbox of this provider that the store
// records for key at generation gen or later: one another server (sharing
// the store) made after this one decided to create generation gen. A
// paused or stopped one is resumed (a stopped one gets the next generation).
func (m *Manager) madeMeanwhile(key string, gen int64) (Sandbox, int64, bool) {
	ctx, cancel := m.callCtx()
	defer cancel()
	rec, ok, err := m.store.Get(ctx, key)
	if err != nil || !ok || rec.Provider != m.opts.Provider.Name() || rec.SandboxID == "" || rec.State == StateGone || rec.Generation < gen {
		return Sandbox{}, 0, false
	}
	info, err := m.opts.Provider.Info(ctx, rec.SandboxID)
	if err != nil || info.State.Terminal() {
		return Sandbox{}, 0, false
	}
	recGen := rec.Generation
	if info.State != StateRunning {
		if err := m.opts.Provider.Resume(ctx, rec.SandboxID); err != nil {
			return Sandbox{}, 0, false
		}
		if info.State == StateStopped {
			recGen++
		}
		info.State = StateRunning
	}
	return info, recGen, true
}

// publish makes sb the workspace's sandbox unless the workspace changed
// (reset, close, pause) since the transition started, in which case sb is
// destroyed instead when this transition made it (own).
func (m *Manager) publish(ws *workspace, f *flight, epoch uint64, sb Sandbox, gen int64, kind EventKind, lost *LostError, own bool) error {
	ctx, cancel := m.callCtx()
	defer cancel()
	ep, err := m.opts.Provider.Endpoint(ctx, sb.ID)
	var cli *client.Client
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
		if lost != nil {
			lost.ReplaceErr = errors.New("the workspace was reset, paused or closed while the replacement was being made")
			return lost
		}
		return fmt.Errorf("workspace %q was reset or closed while its sandbox was being created: %w", ws.key, errSuperseded)
	}
	if err != nil {
		ws.mu.Unlock()
		if own {
			m.killQuietly(sb.ID)
		}
		return fmt.Errorf("workspace %q: reaching sandbox %s: %w", ws.key, sb.ID, err)
	}
	prev := ws.gen
	if ws.cli != nil {
		ws.cli.Close()
	}
	ws.loaded = true
	ws.gen = gen
	ws.sb = &sb
	ws.cli = cli
	ws.state = StateRunning
	ws.lost = nil
	ev := Event{Kind: kind, PrevGeneration: prev, Generation: gen}
	if lost != nil {
		lost.Generation, lost.Replaced = gen, true
		ev.State, ev.Detail, ev.FilesKept = lost.State, lost.Detail, lost.FilesKept
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

func (m *Manager) killQuietly(id string) {
	ctx, cancel := m.callCtx()
	defer cancel()
	if err := m.opts.Provider.Kill(ctx, id); err != nil {
		m.log.Warn("could not kill sandbox", "sandbox", id, "err", err)
	}
}

// resume brings a paused or stopped published sandbox back. A stopped
// sandbox comes back with new processes, so it gets a new generation and
// handles from before are refused.
func (m *Manager) resume(ws *workspace, f *flight, epoch uint64) error {
	ws.mu.Lock()
	if ws.epoch != epoch || ws.sb == nil {
		ws.mu.Unlock()
		return fmt.Errorf("workspace %q changed while resuming: %w", ws.key, errSuperseded)
	}
	id, state, gen := ws.sb.ID, ws.state, ws.gen
	ws.mu.Unlock()
	ctx, cancel := m.callCtx()
	defer cancel()
	if err := m.opts.Provider.Resume(ctx, id); err != nil {
		info, ierr := m.opts.Provider.Info(ctx, id)
		if ierr == nil && info.State.Terminal() {
			return m.replaceLost(ws, f, epoch, gen, info, err, true)
		}
		return fmt.Errorf("workspace %q: resuming sandbox %s: %w", ws.key, id, err)
	}
	m.resumes.Add(1)
	ws.mu.Lock()
	if ws.epoch != epoch {
		ws.mu.Unlock()
		return fmt.Errorf("workspace %q changed while resuming: %w", ws.key, errSuperseded)
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

// replaceLost handles a confirmed loss of generation gen: with AutoRecreate
// it publishes a replacement (a restart of a stopped sandbox keeps its
// files); the returned *LostError reports it either way.
func (m *Manager) replaceLost(ws *workspace, f *flight, epoch uint64, gen int64, info Sandbox, cause error, notRun bool) error {
	lost := &LostError{Key: ws.key, PrevGeneration: gen, State: info.State, Detail: info.Detail, NotRun: notRun, Cause: cause, endedAt: info.EndedAt}
	if lost.Detail == "" {
		lost.Detail = string(info.State)
	}
	m.log.Warn("sandbox lost", "key", ws.key, "sandbox", info.ID, "generation", gen, "state", info.State, "detail", lost.Detail)
	if !m.opts.AutoRecreate {
		ws.mu.Lock()
		if ws.epoch == epoch {
			ws.loaded = true
			ws.lost = lost
		}
		ws.mu.Unlock()
		return lost
	}
	m.recreations.Add(1)
	if info.State == StateStopped && info.ID != "" {
		ctx, cancel := m.callCtx()
		defer cancel()
		err := m.opts.Provider.Resume(ctx, info.ID)
		if err == nil {
			lost.FilesKept = true
			info.State = StateRunning
			return m.publish(ws, f, epoch, info, gen+1, EventRecreated, lost, true)
		}
		m.log.Warn("could not restart stopped sandbox; creating a new one", "sandbox", info.ID, "err", err)
		m.killQuietly(info.ID)
	}
	return m.create(ws, f, epoch, gen+1, EventRecreated, lost)
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
	if err == nil || !client.IsPossibleLoss(err) {
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
			select {
			case <-f.done:
			case <-ctx.Done():
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
		f := m.startFlight(ws, func(ws *workspace, f *flight, epoch uint64) error {
			ctx, cancel := m.callCtx()
			info, ierr := m.opts.Provider.Info(ctx, l.Sandbox.ID)
			cancel()
			if ierr != nil {
				m.log.Warn("could not confirm a suspected sandbox loss; reporting the original error", "key", ws.key, "sandbox", l.Sandbox.ID, "err", ierr, "suspect", err)
				return nil
			}
			if info.State != StateGone && info.State != StateStopped {
				return nil
			}
			notRun := client.NotSent(err) || (!info.EndedAt.IsZero() && info.EndedAt.Before(l.acquired))
			result = m.replaceLost(ws, f, epoch, l.Generation, info, err, notRun)
			return nil
		})
		ws.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
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
	if ws.active == 0 && l.m.opts.IdlePause > 0 && ws.state == StateRunning && ws.sb != nil {
		if ws.idle != nil {
			ws.idle.Stop()
		}
		ws.idle = time.AfterFunc(l.m.opts.IdlePause, func() { l.m.idlePause(ws) })
	}
}

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

// Generation returns key's current generation (0 when it has no sandbox).
func (m *Manager) Generation(key string) int64 {
	m.mu.Lock()
	ws := m.workspaces[key]
	m.mu.Unlock()
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

// Shutdown applies the end-of-session policy to every workspace and stops
// the reaper. Later calls fail with ErrClosed.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	keys := make([]string, 0, len(m.workspaces))
	for k := range m.workspaces {
		keys = append(keys, k)
	}
	m.mu.Unlock()
	close(m.stopReaper)
	<-m.reaperDone
	var errs []error
	for _, k := range keys {
		if err := m.EndSession(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("workspace %q: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// Stats returns counters for metrics.
func (m *Manager) Stats() Stats {
	st := Stats{
		Workspaces:  map[State]int{},
		Creations:   m.creations.Load(),
		Recreations: m.recreations.Load(),
		Pauses:      m.pauses.Load(),
		Resumes:     m.resumes.Load(),
		Reaped:      m.reaped.Load(),
	}
	m.mu.Lock()
	wss := make([]*workspace, 0, len(m.workspaces))
	for _, ws := range m.workspaces {
		wss = append(wss, ws)
	}
	m.mu.Unlock()
	for _, ws := range wss {
		ws.mu.Lock()
		switch {
		case ws.lost != nil:
			st.Workspaces[StateGone]++
		case ws.sb != nil:
			st.Workspaces[ws.state]++
		}
		ws.mu.Unlock()
	}
	return st
}

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

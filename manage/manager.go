package manage

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
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
	// ActivityInterval is how often the Manager records in the store that it
	// runs calls on a sandbox (Record.LastActive), for other servers
	// sharing the store: at most once per interval on calls, and every
	// interval while a call is in progress. Default: a quarter of
	// IdlePause, or DefaultActivityInterval when IdlePause is 0.
	ActivityInterval time.Duration
	// PausedTTL kills sandboxes paused (or stopped) for longer than this; 0
	// keeps them forever.
	PausedTTL time.Duration
	// CallTimeout bounds each lifecycle call to the provider other than
	// Create. Default DefaultCallTimeout.
	CallTimeout time.Duration
	// CreateTimeout bounds Create. Default DefaultCreateTimeout.
	CreateTimeout time.Duration
	// MaxSandboxesPerOwner bounds the workspaces with a sandbox (running,
	// paused or stopped) that one owner holds, counted by the Store over
	// every server sharing it (Store.ReserveSlot); creating one more is a
	// *LimitError. 0 means no limit. Owners come from OwnerOf.
	MaxSandboxesPerOwner int
	// OwnerOf names the owner of a workspace key (an HTTP principal), ""
	// for keys that no limit applies to. Nil means no owner limits.
	OwnerOf func(key string) string
	// ClientOptions are added to every envd client the Manager makes.
	ClientOptions []envdclient.Option
	// Logger receives lifecycle logs. Nil means slog.Default().
	Logger *slog.Logger
	// Holders counts the servers (sharing the Store) that hold each named
	// workspace, so that a sandbox several of them use is paused only when
	// none but this one holds it. Nil means this process is the only one
	// (package manage/holders counts across processes).
	Holders Holders
}

// Holders counts, across the processes sharing a Store, the holders of each
// named workspace. A Manager holds a named workspace from its first
// operation until its session ends (EndSession, Shutdown, or the end of the
// process). Implementations must be safe for concurrent use.
type Holders interface {
	// Hold makes the caller a holder of key until release is called (or
	// the process ends).
	Hold(key string) (release func(), err error)
	// Others reports whether someone other than the caller holds key.
	Others(key string) (bool, error)
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

	// instance names this Manager in Record.ActiveBy.
	instance string

	slots *slots // sandboxes per owner

	// Store rebuilds (rediscover.go): the store damages already handled,
	// whether any was seen, and the named workspaces told that nothing of
	// theirs was found.
	bg              sync.WaitGroup // the rebuild started by New
	recoverMu       sync.Mutex
	damagesSeen     atomic.Uint64
	storeDamaged    atomic.Bool
	toldUnrecovered map[string]bool // guarded by mu

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
		instance:   rand.Text(),
		opts:       opts,
		log:        opts.Logger,
		store:      opts.Store,
		workspaces: map[string]*workspace{},
		slots:      newSlots(opts.MaxSandboxesPerOwner, opts.OwnerOf),

		toldUnrecovered: map[string]bool{},
		stopReaper:      make(chan struct{}),
		reaperDone:      make(chan struct{}),
	}
	if _, ok := opts.Store.(DamageReporter); ok {
		// A store file found damaged at open is rebuilt now; operations
		// that need the records wait for it (recoverStore).
		m.bg.Add(1)
		go func() {
			defer m.bg.Done()
			m.recoverStore()
		}()
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
	cli      *envdclient.Client
	state    State // of the published sandbox
	flight   *flight
	epoch    uint64 // bumped by reset, pause, reap and close: in-flight replacements are then discarded
	active   int    // leases not yet released
	idle     *time.Timer
	warned   int64      // generation whose unisolated warning was delivered
	lastLoss *LostError // the most recent recreation, for late reporters of the same loss
	lost     *LostError // set when the sandbox is lost and not replaced (AutoRecreate off)
	gone     bool       // the workspace ended (session closed)
	// unhold releases this Manager's hold on a named workspace (nil: not
	// held, see Options.Holders).
	unhold func()

	activeWrote time.Time     // the LastActive this Manager last wrote (or tried to) for the published sandbox
	activity    chan struct{} // closed to stop the loop that records activity while leases are held

	keepAlive     chan struct{} // closed to stop the keep-alive loop (KeepAliver providers) while leases are held
	keptAliveID   string        // the sandbox the last KeepAlive was for
	keptAliveTime time.Time     // and when it was sent
}

// takeSandboxLocked unpublishes the workspace's sandbox, so the next
// operation finds none, and returns the sandbox and client it had; the
// caller closes the client. Called with ws.mu held.
func (ws *workspace) takeSandboxLocked() (*Sandbox, *envdclient.Client) {
	sb, cli := ws.sb, ws.cli
	ws.sb, ws.cli, ws.state = nil, nil, ""
	return sb, cli
}

// dropSandboxLocked unpublishes the workspace's sandbox and closes its
// client. Called with ws.mu held.
func (ws *workspace) dropSandboxLocked() {
	if _, cli := ws.takeSandboxLocked(); cli != nil {
		cli.Close()
	}
}

// setClientLocked makes cli the workspace's envd client, closing the one it
// replaces. Called with ws.mu held.
func (ws *workspace) setClientLocked(cli *envdclient.Client) {
	if ws.cli != nil {
		ws.cli.Close()
	}
	ws.cli = cli
}

// stopIdleLocked stops the idle-pause clock. Called with ws.mu held.
func (ws *workspace) stopIdleLocked() {
	if ws.idle != nil {
		ws.idle.Stop()
		ws.idle = nil
	}
}

// workspace returns key's workspace, making it on first use; named marks it
// as surviving sessions (once named, it stays named).
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

// lookup returns key's workspace, or nil when this Manager has not seen key.
func (m *Manager) lookup(key string) *workspace {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workspaces[key]
}

// callCtx bounds one provider or store call by CallTimeout.
func (m *Manager) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), m.opts.CallTimeout)
}

// hasOwnSandbox reports whether rec names a sandbox of this Manager's
// provider.
func (m *Manager) hasOwnSandbox(rec Record) bool {
	return rec.Provider == m.opts.Provider.Name() && rec.SandboxID != ""
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
	if ws.state == StateRunning && ws.sb != nil {
		// Made, resumed or reached for an operation: activity.
		ws.activeWrote = now
	}
	rec.LastActive = ws.activeWrote
	if !rec.LastActive.IsZero() {
		rec.ActiveBy = m.instance
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

// killQuietly kills sandbox id, logging a failure: it is for sandboxes no
// workspace uses any more, whose end nobody waits for.
func (m *Manager) killQuietly(id string) {
	ctx, cancel := m.callCtx()
	defer cancel()
	if err := m.opts.Provider.Kill(ctx, id); err != nil {
		m.log.Warn("could not kill sandbox", "sandbox", id, "err", err)
	}
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
	m.bg.Wait()
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

// Package e2bserver is a local server of E2B's management API (the sandbox
// subset: create, list, get, kill, pause, resume, connect, timeout,
// refresh) and of E2B's envd proxy, on one listener, over a manage.Provider
// (the local or the docker one). It is what `sandbox-mcp manage serve`
// runs: the e2b provider and E2B's own SDKs reach this machine's sandboxes
// through it exactly as they reach E2B's cloud.
//
// Behaviour follows E2B's (paths, bodies, status codes, error bodies,
// X-Next-Token paging, the 15 s default TTL, kill or pause at the end of
// it, auto-resume through the proxy); see shared/docs/envd-protocol.md
// §4–5. API keys are compared in constant time; a request without a valid
// one is refused before anything else happens. Each key sees only the
// sandboxes it created: another key's sandbox is answered as absent.
package e2bserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// Defaults of Config.
const (
	// DefaultTimeout is a sandbox's time to live when create does not say
	// (E2B's default).
	DefaultTimeout = 15 * time.Second
	// DefaultMaxTimeout is the longest time to live a request may ask.
	DefaultMaxTimeout = 24 * time.Hour
	// providerTimeout bounds each provider call the server makes.
	providerTimeout = 2 * time.Minute
	// clientID is SandboxDetail's deprecated clientID (E2B sends a fixed
	// placeholder too).
	clientID = "6532622b"
)

// Config configures a Server. Provider and at least one API key are
// required.
type Config struct {
	// Provider makes and controls the sandboxes.
	Provider manage.Provider
	// APIKeys are the accepted values of X-API-Key. Each key is its own
	// tenant.
	APIKeys []string
	// StateDir, when set, holds the sandbox records
	// (e2bserver-sandboxes.json), so a restarted server knows its
	// sandboxes. Without it the records live in memory and Close kills
	// every sandbox.
	StateDir string
	// Domain is the Sandbox.domain the API reports ("" reports none, and
	// SDKs use their own configured domain).
	Domain string
	// MaxTimeout is the longest time to live; default DefaultMaxTimeout.
	MaxTimeout time.Duration
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger

	// expired, when set (tests), receives the id of each sandbox whose
	// timeout action ran.
	expired chan<- string
}

// Server is the management API and envd proxy. It is an http.Handler.
type Server struct {
	provider   manage.Provider
	keys       [][sha256.Size]byte
	statePath  string
	domain     string
	maxTimeout time.Duration
	log        *slog.Logger
	api        *http.ServeMux
	expired    chan<- string

	mu      sync.Mutex
	boxes   map[string]*sandbox
	targets map[string]*proxyTarget // by sandbox id

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// New checks cfg, loads the records of StateDir (dropping sandboxes the
// provider no longer has, restarting running ones it reports stopped) and
// starts the TTL reaper.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Provider == nil {
		return nil, errors.New("e2bserver: no provider")
	}
	if len(cfg.APIKeys) == 0 {
		return nil, errors.New("e2bserver: no API key: give at least one")
	}
	s := &Server{
		provider:   cfg.Provider,
		domain:     cfg.Domain,
		maxTimeout: cfg.MaxTimeout,
		log:        cfg.Logger,
		expired:    cfg.expired,
		boxes:      map[string]*sandbox{},
		targets:    map[string]*proxyTarget{},
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	if s.maxTimeout <= 0 {
		s.maxTimeout = DefaultMaxTimeout
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	for _, k := range cfg.APIKeys {
		if k == "" {
			return nil, errors.New("e2bserver: an API key is empty")
		}
		s.keys = append(s.keys, sha256.Sum256([]byte(k)))
	}
	if cfg.StateDir != "" {
		s.statePath = filepath.Join(cfg.StateDir, stateFileName)
		if err := s.load(ctx); err != nil {
			return nil, err
		}
	}
	s.api = s.routes()
	go s.reap()
	return s, nil
}

// load reads the records and reconciles them with the provider.
func (s *Server) load(ctx context.Context) error {
	recs, err := loadRecords(s.statePath)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		info, err := s.provider.Info(ctx, rec.ProviderID)
		if err != nil {
			return fmt.Errorf("e2bserver: sandbox %s: %w", rec.ID, err)
		}
		if info.State.Terminal() {
			s.log.Info("sandbox of a previous run is gone", "sandbox", rec.ID)
			continue
		}
		if rec.State == e2bapi.StateRunning && info.State != manage.StateRunning {
			// Running when the server stopped: start it again (its
			// processes are gone, its files kept).
			if err := s.provider.Resume(ctx, rec.ProviderID); err != nil {
				s.log.Warn("could not restart a sandbox of a previous run; it is kept as paused", "sandbox", rec.ID, "err", err)
				rec.State = e2bapi.StatePaused
			}
		}
		s.boxes[rec.ID] = &sandbox{rec: rec}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saveLocked()
	return nil
}

// saveLocked persists the records (when there is a state directory). A
// failure is logged: the server keeps serving from memory.
func (s *Server) saveLocked() {
	if s.statePath == "" {
		return
	}
	recs := make([]record, 0, len(s.boxes))
	for _, b := range s.boxes {
		recs = append(recs, b.rec)
	}
	if err := saveRecords(s.statePath, recs); err != nil {
		s.log.Error("could not save the sandbox records", "path", s.statePath, "err", err)
	}
}

// Close stops the reaper and the proxy's connections. Sandboxes stay as
// they are when the records are persisted; without a state directory every
// sandbox is killed (nothing could find them again).
func (s *Server) Close(ctx context.Context) error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	targets := s.targets
	s.targets = map[string]*proxyTarget{}
	var kill []*sandbox
	if s.statePath == "" {
		for id, b := range s.boxes {
			kill = append(kill, b)
			delete(s.boxes, id)
		}
	}
	s.mu.Unlock()
	for _, t := range targets {
		t.client.Close()
	}
	var errs []error
	for _, b := range kill {
		b.op.Lock()
		errs = append(errs, s.provider.Kill(ctx, b.rec.ProviderID))
		b.op.Unlock()
	}
	return errors.Join(errs...)
}

// ServeHTTP routes envd proxy traffic (a sandbox host or the routing
// headers) to the proxy, everything else to the management API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rt, ok := routeOf(r); ok {
		s.serveProxy(w, r, rt)
		return
	}
	owner, ok := s.authenticate(r)
	if !ok {
		msg := "Invalid API key"
		if r.Header.Get(e2bapi.HeaderAPIKey) == "" {
			msg = "Missing API key: send it in the " + e2bapi.HeaderAPIKey + " header"
		}
		writeError(w, http.StatusUnauthorized, msg)
		return
	}
	if _, pattern := s.api.Handler(r); pattern == "" {
		writeError(w, http.StatusNotFound, "Not found: "+r.Method+" "+r.URL.Path)
		return
	}
	s.api.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ownerKey{}, owner)))
}

// ownerKey is the request context key of the authenticated owner.
type ownerKey struct{}

// ownerOf is the authenticated owner of r (set by ServeHTTP).
func ownerOf(r *http.Request) string {
	o, _ := r.Context().Value(ownerKey{}).(string)
	return o
}

// authenticate checks X-API-Key against every configured key in constant
// time (digests of equal length, every key compared) and returns the
// owner: the hex digest of the key.
func (s *Server) authenticate(r *http.Request) (string, bool) {
	key := r.Header.Get(e2bapi.HeaderAPIKey)
	if key == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(key))
	match := 0
	for i := range s.keys {
		match |= subtle.ConstantTimeCompare(sum[:], s.keys[i][:])
	}
	if match != 1 {
		return "", false
	}
	return hex.EncodeToString(sum[:]), true
}

// lookup returns owner's sandbox id, or nil when there is none (or it is
// another owner's, which is answered the same way).
func (s *Server) lookup(owner, id string) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[id]
	if b == nil || b.rec.Owner != owner {
		return nil
	}
	return b
}

// kickReaper tells the reaper an end time changed.
func (s *Server) kickReaper() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// reap applies each running sandbox's timeout action (kill, or pause with
// autoPause) when its end time comes.
func (s *Server) reap() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := s.expireDue(time.Now())
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-timer.C:
		}
	}
}

// expireDue starts the timeout action of every running sandbox whose end
// time is not after now, and returns the earliest end time still ahead
// (zero when none).
func (s *Server) expireDue(now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, b := range s.boxes {
		if b.rec.State != e2bapi.StateRunning || b.expiring || b.killing {
			continue
		}
		if !b.rec.EndAt.After(now) {
			b.expiring = true
			go s.expire(b)
			continue
		}
		if next.IsZero() || b.rec.EndAt.Before(next) {
			next = b.rec.EndAt
		}
	}
	return next
}

// expire kills or pauses b, unless its end time moved meanwhile.
func (s *Server) expire(b *sandbox) {
	defer s.kickReaper()
	b.op.Lock()
	defer b.op.Unlock()
	s.mu.Lock()
	b.expiring = false
	due := b.rec.State == e2bapi.StateRunning && !b.rec.EndAt.After(time.Now()) && s.boxes[b.rec.ID] == b
	pause := b.rec.AutoPause
	s.mu.Unlock()
	if !due {
		return
	}
	if s.expired != nil {
		defer func() { s.expired <- b.rec.ID }()
	}
	ctx, cancel := context.WithTimeout(context.Background(), providerTimeout)
	defer cancel()
	if pause {
		if err := s.provider.Pause(ctx, b.rec.ProviderID); err != nil {
			s.log.Error("could not pause an expired sandbox; killing it", "sandbox", b.rec.ID, "err", err)
		} else {
			s.setState(b, e2bapi.StatePaused)
			s.log.Info("sandbox reached its end time and was paused", "sandbox", b.rec.ID)
			return
		}
	}
	if err := s.kill(ctx, b); err != nil {
		s.log.Error("could not kill an expired sandbox", "sandbox", b.rec.ID, "err", err)
		return
	}
	s.log.Info("sandbox reached its end time and was killed", "sandbox", b.rec.ID)
}

// setState records b's new state.
func (s *Server) setState(b *sandbox, st e2bapi.SandboxState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.rec.State = st
	s.saveLocked()
}

// kill destroys b with the provider and forgets it. The caller holds b.op.
func (s *Server) kill(ctx context.Context, b *sandbox) error {
	s.mu.Lock()
	b.killing = true
	s.mu.Unlock()
	err := s.provider.Kill(ctx, b.rec.ProviderID)
	s.mu.Lock()
	b.killing = false
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.forget(b)
	return nil
}

// resume brings a paused b back with end time now+ttl. The caller holds
// b.op.
func (s *Server) resume(ctx context.Context, b *sandbox, ttl time.Duration) error {
	if err := s.provider.Resume(ctx, b.rec.ProviderID); err != nil {
		return err
	}
	s.mu.Lock()
	b.rec.State = e2bapi.StateRunning
	b.rec.EndAt = time.Now().Add(ttl).UTC()
	s.saveLocked()
	s.mu.Unlock()
	s.kickReaper()
	return nil
}

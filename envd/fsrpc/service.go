//go:build linux

// Package fsrpc implements envd's Connect service filesystem.Filesystem:
// Stat, MakeDir, Move, ListDir, Remove, the WatchDir stream and the polling
// watcher (CreateWatcher, GetWatcherEvents, RemoveWatcher).
//
// Semantics follow E2B's envd (0.6.x) so that E2B's SDKs work unchanged.
// Every path goes through a paths.Resolver; every error carries a Connect
// code and a message naming the path. Things the service creates (directories
// for MakeDir, destination parents for Move) are owned by the request's user
// when that user differs from the daemon's (identity.User.Switch).
package fsrpc

import (
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem/filesystemconnect"
)

// Options configures New.
type Options struct {
	// Paths resolves every client path. Required.
	Paths *paths.Resolver
	// Users resolves the default user when a request carries none. Nil means
	// identity.NewResolver with its defaults.
	Users *identity.Resolver
	// Logger receives watcher diagnostics. Nil means slog.Default().
	Logger *slog.Logger
	// PollerIdle is how long a polling watcher (CreateWatcher) lives without
	// a GetWatcherEvents call before it is dropped as if removed: a client
	// that went away would otherwise hold an inotify instance, of which each
	// user has few (fs.inotify.max_user_instances), forever. Zero means
	// DefaultPollerIdle.
	PollerIdle time.Duration
	// MaxPollers caps the polling watchers alive at once; CreateWatcher past
	// it fails with resource_exhausted. Zero means DefaultMaxPollers.
	MaxPollers int
}

// Defaults of Options.
const (
	DefaultPollerIdle = 5 * time.Minute
	DefaultMaxPollers = 32
)

// Service implements filesystemconnect.FilesystemHandler. It is safe for
// concurrent use. Close stops every watcher it started.
type Service struct {
	paths      *paths.Resolver
	users      *identity.Resolver
	log        *slog.Logger
	pollerIdle time.Duration
	maxPollers int
	now        func() time.Time // the clock of poller idleness; tests replace it

	mu      sync.Mutex
	closed  bool
	watches map[*watch]struct{} // every running watch, streamed or polled
	pollers map[string]*poller  // polling watchers by id
	sweeper *time.Timer         // runs sweepTick while pollers exist
}

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// New returns a Service. It panics if opts.Paths is nil, a programming error.
func New(opts Options) *Service {
	if opts.Paths == nil {
		panic("fsrpc.New: Options.Paths is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	users := opts.Users
	if users == nil {
		users = identity.NewResolver(identity.ResolverOptions{Logger: log})
	}
	s := &Service{
		paths:      opts.Paths,
		users:      users,
		log:        log,
		pollerIdle: opts.PollerIdle,
		maxPollers: opts.MaxPollers,
		now:        time.Now,
		watches:    map[*watch]struct{}{},
		pollers:    map[string]*poller{},
	}
	if s.pollerIdle <= 0 {
		s.pollerIdle = DefaultPollerIdle
	}
	if s.maxPollers <= 0 {
		s.maxPollers = DefaultMaxPollers
	}
	return s
}

// Handler returns the service's route prefix and HTTP handler, built with
// filesystemconnect.NewFilesystemHandler and opts.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return filesystemconnect.NewFilesystemHandler(s, opts...)
}

// Close stops every watcher: running WatchDir streams end normally and
// polling watchers are dropped. Later watch requests fail with unavailable;
// the other RPCs keep working. Close is safe to call more than once.
func (s *Service) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	watches := make([]*watch, 0, len(s.watches))
	for w := range s.watches {
		watches = append(watches, w)
	}
	s.watches = map[*watch]struct{}{}
	s.pollers = map[string]*poller{}
	if s.sweeper != nil {
		s.sweeper.Stop()
		s.sweeper = nil
	}
	s.mu.Unlock()

	for _, w := range watches {
		w.close()
	}
}

// resolve maps a client path to a host path, turning resolver errors into
// Connect errors (see PathError).
func (s *Service) resolve(p string, u identity.User) (string, error) {
	abs, err := s.paths.Resolve(p, u)
	if err != nil {
		return "", PathError(err, p)
	}
	return abs, nil
}

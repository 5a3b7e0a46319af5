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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

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
}

// Service implements filesystemconnect.FilesystemHandler. It is safe for
// concurrent use. Close stops every watcher it started.
type Service struct {
	paths *paths.Resolver
	users *identity.Resolver
	log   *slog.Logger

	mu      sync.Mutex
	closed  bool
	watches map[*watch]struct{} // every running watch, streamed or polled
	pollers map[string]*poller  // polling watchers by id
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
	return &Service{
		paths:   opts.Paths,
		users:   users,
		log:     log,
		watches: map[*watch]struct{}{},
		pollers: map[string]*poller{},
	}
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
	s.mu.Unlock()

	for _, w := range watches {
		w.close()
	}
}

// user returns the user the request acts as: the one the daemon's middleware
// put in the context, else the default user.
func (s *Service) user(ctx context.Context) identity.User {
	if u, ok := identity.FromContext(ctx); ok {
		return u
	}
	return s.users.Lookup("")
}

// resolve maps a client path to a host path, turning resolver errors into
// Connect errors: invalid_argument for malformed paths, permission_denied for
// paths outside the root.
func (s *Service) resolve(p string, u identity.User) (string, error) {
	abs, err := s.paths.Resolve(p, u)
	if err == nil {
		return abs, nil
	}
	switch {
	case errors.Is(err, paths.ErrOutside):
		return "", connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, paths.ErrInvalid):
		return "", connect.NewError(connect.CodeInvalidArgument, err)
	default:
		return "", connect.NewError(connect.CodeInternal, fmt.Errorf("resolve path %q: %w", p, err))
	}
}

//go:build linux

// Package daemon assembles sandbox-mcp's envd: the Process and Filesystem
// Connect services and the REST endpoints behind one HTTP handler, with
// E2B envd's middleware (CORS, access token, Basic-auth user), served over
// HTTP/1.1 and unencrypted HTTP/2 on a TCP address or a unix socket.
//
// The Connect handlers accept all three protocols connect-go speaks (Connect,
// gRPC and gRPC-Web) with both the binary and the JSON codec, so E2B's SDKs
// (Connect + JSON), grpcurl-style tools and sandbox-mcp's own client (Connect +
// binary over h2c) all work against the same daemon.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/fsrpc"
	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
	"github.com/sandbox-mcp/sandbox-mcp/envd/processrpc"
	"github.com/sandbox-mcp/sandbox-mcp/envd/rest"
)

// Daemon is one envd instance. Create it with New; it is safe for concurrent
// use.
type Daemon struct {
	log     *slog.Logger
	handler http.Handler
	procs   *processrpc.Service
	files   *fsrpc.Service

	mu      sync.Mutex
	servers []*http.Server
	closed  bool
}

// New validates cfg and builds the daemon's handler. The root must exist.
func New(cfg Config) (*Daemon, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Root == "" {
		return nil, errors.New("envd: a root directory is required")
	}
	resolver, err := paths.New(cfg.Root, cfg.Confine)
	if err != nil {
		return nil, fmt.Errorf("envd: %w", err)
	}
	users := identity.NewResolver(identity.ResolverOptions{
		DefaultUser: cfg.DefaultUser,
		Home:        resolver.Root(),
		Logger:      log,
	})
	env := maps.Clone(cfg.Env)
	if env == nil {
		env = map[string]string{}
	}
	d := &Daemon{log: log}
	d.procs = processrpc.New(processrpc.Options{Paths: resolver, Users: users, Env: env, Logger: log})
	d.files = fsrpc.New(fsrpc.Options{Paths: resolver, Users: users, Logger: log})

	mux := http.NewServeMux()
	mux.Handle(d.procs.Handler())
	mux.Handle(d.files.Handler())
	restHandler := rest.New(rest.Options{
		Paths:          resolver,
		Users:          users,
		AccessToken:    cfg.AccessToken,
		Env:            env,
		MaxUploadBytes: cfg.MaxUploadBytes,
		Logger:         log,
	})
	mux.Handle("/", restHandler)

	var h http.Handler = mux
	h = withUser(h, users)
	h = withAccessToken(h, cfg.AccessToken)
	h = withCORS(h)
	h = withVersion(h)
	d.handler = h
	return d, nil
}

// Handler returns the daemon's HTTP handler, for serving it yourself or in
// tests (httptest). Serve uses the same handler.
func (d *Daemon) Handler() http.Handler { return d.handler }

// Serve accepts connections on ln (HTTP/1.1 and unencrypted HTTP/2) until
// Shutdown or Close. It returns nil after a shutdown, and
// http.ErrServerClosed (closing ln) when called after one.
func (d *Daemon) Serve(ln net.Listener) error {
	srv := &http.Server{
		Handler: d.handler,
		// envd keeps idle connections for 640 s and sets no read or write
		// timeout, so long streams live; only header reading is bounded here.
		IdleTimeout:       640 * time.Second,
		ReadHeaderTimeout: 30 * time.Second,
		Protocols:         new(http.Protocols),
		HTTP2: &http.HTTP2Config{
			// Large windows let one stream carry hundreds of MB/s.
			MaxReceiveBufferPerConnection: 16 << 20,
			MaxReceiveBufferPerStream:     8 << 20,
			MaxConcurrentStreams:          1000,
			MaxReadFrameSize:              1 << 20,
		},
		ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		_ = ln.Close() // as http.Server.Serve does when it returns
		return http.ErrServerClosed
	}
	d.servers = append(d.servers, srv)
	d.mu.Unlock()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, kills every process the daemon
// started (which ends their streams), stops watchers, and waits for
// in-flight requests until ctx ends. It is safe to call more than once.
func (d *Daemon) Shutdown(ctx context.Context) error {
	servers := d.takeServers()
	d.procs.Close()
	d.files.Close()
	var errs []error
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, err, srv.Close())
		}
	}
	return errors.Join(errs...)
}

// Abort stops the daemon the way a crash would look to its clients:
// connections are dropped at once (streams end without their end events),
// then the processes are killed. Tests use it to simulate a lost sandbox.
func (d *Daemon) Abort() {
	for _, srv := range d.takeServers() {
		_ = srv.Close()
	}
	d.procs.Close()
	d.files.Close()
}

// Close is Shutdown without waiting for in-flight requests: it kills the
// processes, stops watchers and closes every connection at once. It returns
// the errors of closing the listeners.
func (d *Daemon) Close() error {
	servers := d.takeServers()
	d.procs.Close()
	d.files.Close()
	var errs []error
	for _, srv := range servers {
		errs = append(errs, srv.Close())
	}
	return errors.Join(errs...)
}

// takeServers marks the daemon closed (Serve then refuses) and returns the
// servers to stop, each only once.
func (d *Daemon) takeServers() []*http.Server {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	servers := d.servers
	d.servers = nil
	return servers
}

// Listen opens addr: "unix:/path/to/socket", "host:port", or "fd:N" for a
// listening socket inherited as descriptor N (see listenFD). A stale socket
// file left by a previous daemon is replaced; the socket is made accessible
// to its owner only.
func Listen(addr string) (net.Listener, error) {
	if number, ok := strings.CutPrefix(addr, "fd:"); ok {
		return listenFD(addr, number)
	}
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return nil, fmt.Errorf("listen %q: empty socket path", addr)
		}
		if err := removeStaleSocket(path); err != nil {
			return nil, err
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen %q: %w", addr, err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return nil, fmt.Errorf("listen %q: %w", addr, err)
		}
		return ln, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("listen %q: want host:port or unix:/path: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %q: %w", addr, err)
	}
	return ln, nil
}

// removeStaleSocket deletes path if it is a socket nobody answers on.
func removeStaleSocket(path string) error {
	info, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen unix:%s: %w", path, err)
	}
	if info.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("listen unix:%s: a file that is not a socket is in the way", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("listen unix:%s: another daemon is listening there", path)
	}
	return os.Remove(path)
}

// withVersion stamps every response with the protocol version, so clients can
// learn it from GET /health without a management API.
func withVersion(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Envd-Version", Version)
		next.ServeHTTP(w, r)
	})
}

// withCORS allows any origin, as envd does: the access token, not the
// origin, protects the daemon, and E2B's browser SDK needs it.
func withCORS(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", "*")
			h.Set("Access-Control-Expose-Headers", "*")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
				h.Set("Access-Control-Allow-Headers", "*")
				h.Set("Access-Control-Max-Age", "7200")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// withAccessToken requires X-Access-Token when a token is configured. GET
// /health stays open for liveness probes; /files checks the header or a
// signed URL itself.
func withAccessToken(next http.Handler, token string) http.Handler {
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/files" {
			next.ServeHTTP(w, r)
			return
		}
		if !rest.TokenOK(r, token) {
			drain(r)
			rest.WriteError(w, http.StatusUnauthorized, rest.UnauthorizedMessage)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// withUser puts the Basic-auth user of an RPC into the request context.
func withUser(next http.Handler, users *identity.Resolver) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := identity.ParseBasic(r.Header.Get("Authorization"))
		if err != nil {
			drain(r)
			rest.WriteError(w, http.StatusUnauthorized, "invalid username: "+err.Error())
			return
		}
		u := users.Lookup(name)
		next.ServeHTTP(w, r.WithContext(identity.WithUser(r.Context(), u)))
	})
}

// drain reads a little of a rejected request's body so the connection can be
// reused for the next request.
func drain(r *http.Request) {
	if r.Body != nil {
		_, _ = io.CopyN(io.Discard, r.Body, 64<<10)
	}
}

// Run serves cfg on addr until ctx ends, then shuts down gracefully (bounded
// by five seconds). Once the listener is open it writes "ready <addr>\n" to
// ready, when ready is not nil, so a parent can wait for the daemon without
// polling.
func Run(ctx context.Context, cfg Config, addr string, ready io.Writer) error {
	d, err := New(cfg)
	if err != nil {
		return err
	}
	ln, err := Listen(addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- d.Serve(ln) }()
	d.log.Info("envd listening", "addr", addr, "root", cfg.Root, "confine", cfg.Confine, "version", Version)
	if ready != nil {
		if _, err := fmt.Fprintf(ready, "ready %s\n", ln.Addr()); err != nil {
			d.log.Warn("could not signal readiness", "err", err)
		}
	}
	// Off the start's critical path (a thread costs ~0.1 ms to make): a
	// workload takes longer than that to fill the limit.
	go reserveThreads(reservedThreads(ownTaskLimit()))
	select {
	case err := <-errc:
		d.Close()
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = d.Shutdown(shutdownCtx)
	// ErrServerClosed: the shutdown came before the goroutine got to
	// Serve (a SIGTERM right after the ready line).
	if serveErr := <-errc; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	return err
}

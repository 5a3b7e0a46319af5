package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// drainTimeout bounds the wait for cancelled calls to return after the
// shutdown timeout has passed.
const drainTimeout = 10 * time.Second

// httpCall is what an HTTP request tells the tool middleware: who asked, and
// which named workspace they asked for ("" when none).
type httpCall struct {
	principal string
	workspace string
}

type httpCallKey struct{}

// Handler returns the HTTP handler: /mcp (streamable HTTP behind the
// middleware), /healthz and /metrics. The middleware order, outermost first:
// request logging and metrics, the Host check on loopback connections (DNS
// rebinding; mcp-go's copy of it is off), the Origin allowlist (and CORS),
// bearer authentication (not for /healthz), the request memory budget
// (reserveMemory), the body limit, then the session
// checks (a session id used by another principal → 404; a request without a
// session id from a revision that has sessions → 400; an invalid
// Sandbox-Workspace → 400). Every call returns the same handler.
func (s *Server) Handler() http.Handler {
	s.httpMu.Lock()
	defer s.httpMu.Unlock()
	if s.handler == nil {
		s.buildHTTP()
	}
	return s.handler
}

// buildHTTP makes the streamable-HTTP server and the handler. Called with
// httpMu held.
func (s *Server) buildHTTP() {
	s.streamable = server.NewStreamableHTTPServer(s.mcp,
		// Stateful: ids are minted and checked by the registry, unknown and
		// ended ones get 404, and Terminate (DELETE) applies the
		// end-of-session policy. Revision 2026-07-28 requests bypass it.
		// No WithSessionIdleTTL: the registry's sweeper ends idle sessions
		// (see sessionRegistry) and releases mcp-go's state of them.
		server.WithSessionIdManagerResolver(s.sessions),
		// checkHost covers every path, /mcp included.
		server.WithDisableLocalhostProtection(true),
		// Required, not optional: without an event store mcp-go can drop the
		// last notification a handler sends before returning.
		server.WithEventStore(newEventStore(eventStoreMaxEvents, eventStoreMaxBytes)),
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			p, _ := principalFrom(r.Context())
			return context.WithValue(ctx, httpCallKey{}, &httpCall{principal: p, workspace: r.Header.Get(WorkspaceHeader)})
		}),
		server.WithStreamableHTTPLogger(s.log),
	)
	streamable := s.streamable
	s.sessions.mu.Lock()
	s.sessions.release = func(id string) { releaseSession(streamable, id) }
	s.sessions.mu.Unlock()
	s.sessions.startSweeper()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("/metrics", s.authenticate(http.HandlerFunc(s.serveMetrics)))
	mux.Handle("/mcp", s.authenticate(s.reserveMemory(s.limitBody(s.checkSession(s.track(s.splitArguments(literalJSON(s.streamable))))))))
	s.handler = s.logRequests(s.checkHost(s.checkOrigin(mux)))
}

// releaseSession drops mcp-go's state of a session the registry ended by
// itself (idle): its registration, listening stream, resumable streams and
// stored events. A DELETE is the one entry point that releases all of it;
// the registry no longer knows the id, so the DELETE's Terminate is a no-op.
func releaseSession(streamable *server.StreamableHTTPServer, id string) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodDelete, "/mcp", nil)
	if err != nil {
		return // a constant, valid request: does not happen
	}
	req.Header.Set(server.HeaderKeySessionID, id)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20251125)
	streamable.ServeHTTP(discardResponse{header: http.Header{}}, req)
}

// discardResponse is a ResponseWriter that drops what is written to it.
type discardResponse struct{ header http.Header }

func (d discardResponse) Header() http.Header         { return d.header }
func (d discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (d discardResponse) WriteHeader(int)             {}

// EndpointURL is the URL of the MCP endpoint served on addr: https when
// Config.TLSCert is set.
func (s *Server) EndpointURL(addr net.Addr) string {
	scheme := "http"
	if s.cfg.TLSCert != "" {
		scheme = "https"
	}
	return scheme + "://" + addr.String() + "/mcp"
}

// ServeHTTP serves Handler on ln (TLS when Config.TLSCert and TLSKey are set)
// until ctx ends, then shuts down gracefully: it stops accepting, lets
// in-flight calls finish for Config.ShutdownTimeout, cancels the ones still
// running, ends every session (end-of-session policy) and shuts the Manager
// down. It returns nil after a shutdown caused by ctx.
func (s *Server) ServeHTTP(ctx context.Context, ln net.Listener) error {
	h := s.Handler()
	// Request contexts derive from base, not ctx: ctx ending must not cancel
	// in-flight calls before the shutdown timeout.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           h,
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	tlsOn := s.cfg.TLSCert != ""
	if tlsOn {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
		if err != nil {
			return fmt.Errorf("loading TLS certificate %s and key %s: %w", s.cfg.TLSCert, s.cfg.TLSKey, err)
		}
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	served := make(chan error, 1)
	go func() {
		if tlsOn {
			served <- srv.ServeTLS(ln, "", "")
		} else {
			served <- srv.Serve(ln)
		}
	}()
	s.log.Info("serving MCP over streamable HTTP", "url", s.EndpointURL(ln.Addr()), "tls", tlsOn, "auth", len(s.tokens) > 0)

	select {
	case err := <-served:
		// The listener failed: nothing graceful left to do but the policy.
		_ = s.Shutdown(context.Background())
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down HTTP server", "timeout", s.cfg.ShutdownTimeout)
	// Listening GET streams never end by themselves; close them first.
	s.inflight.startDrain()
	graceCtx, cancelGrace := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	err := srv.Shutdown(graceCtx)
	cancelGrace()
	if err != nil {
		n := s.inflight.count()
		s.log.Warn("in-flight calls did not finish in time; cancelling them", "calls", n)
		cancelBase()
		waitCtx, cancelWait := context.WithTimeout(context.Background(), drainTimeout)
		s.inflight.wait(waitCtx)
		cancelWait()
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Warn("HTTP server stopped with an error", "err", err)
	}
	return s.Shutdown(context.Background())
}

// Shutdown stops the idle-session sweeper, ends every HTTP session and
// releases mcp-go's state of them, then shuts the Manager down, which
// applies the end-of-session policy to every workspace once (anonymous ones
// killed, named ones paused). ServeHTTP calls it; call it yourself after
// serving Handler elsewhere, or after ServeStdio or in-process calls.
// Later calls return the first call's result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		s.sessions.stopSweeping()
		s.sessions.closeAll()
		s.httpMu.Lock()
		streamable := s.streamable
		s.httpMu.Unlock()
		if streamable != nil {
			// Closes listening streams and drops every session's state; its
			// Terminate calls find the registry empty.
			_ = streamable.Shutdown(ctx)
		}
		s.shutdownErr = s.manager.Shutdown(ctx)
	})
	return s.shutdownErr
}

// inflight counts /mcp requests being served and can cancel the listening
// GET streams, which would otherwise hold a graceful shutdown to its
// timeout.
type inflight struct {
	mu       sync.Mutex
	n        int
	waiters  []chan struct{}
	streams  map[*int]context.CancelFunc
	draining bool
}

func (f *inflight) begin() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

func (f *inflight) end() {
	f.mu.Lock()
	f.n--
	if f.n == 0 {
		for _, w := range f.waiters {
			close(w)
		}
		f.waiters = nil
	}
	f.mu.Unlock()
}

func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// wait returns when no request is in flight or ctx ends.
func (f *inflight) wait(ctx context.Context) {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	f.waiters = append(f.waiters, ch)
	f.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// stream registers a listening stream's cancel function; the returned
// function unregisters it.
func (f *inflight) stream(cancel context.CancelFunc) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.draining {
		cancel()
		return func() {}
	}
	if f.streams == nil {
		f.streams = map[*int]context.CancelFunc{}
	}
	id := new(int)
	f.streams[id] = cancel
	return func() {
		f.mu.Lock()
		delete(f.streams, id)
		f.mu.Unlock()
	}
}

// startDrain cancels the listening streams, now and from now on.
func (f *inflight) startDrain() {
	f.mu.Lock()
	f.draining = true
	for id, cancel := range f.streams {
		cancel()
		delete(f.streams, id)
	}
	f.mu.Unlock()
}

// track counts the request in flight; a GET (a listening stream) can be
// cancelled by shutdown, and a POST's SSE events are counted (see
// flushNotifications).
func (s *Server) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.begin()
		defer s.inflight.end()
		switch r.Method {
		case http.MethodGet:
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer s.inflight.stream(cancel)()
			r = r.WithContext(ctx)
		case http.MethodPost:
			counter := newNotifyCounter()
			w = sseCounter{ResponseWriter: w, counter: counter}
			r = r.WithContext(context.WithValue(r.Context(), notifyCounterKey{}, counter))
		}
		next.ServeHTTP(w, r)
	})
}

type bodyKey struct{}

// limitBody limits POST bodies to Config.MaxBodyBytes: beyond it the
// request gets 413 with a JSON-RPC error. A body is read into memory here
// only when checkSession must look into it (no session id and no
// 2026-07-28 protocol header: is it initialize?); otherwise mcp-go reads it
// through http.MaxBytesReader and an overflow is turned into the same 413.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		limit := s.cfg.MaxBodyBytes
		if r.ContentLength > limit {
			writeTooLarge(w, limit)
			return
		}
		if r.Header.Get(server.HeaderKeySessionID) != "" || mcp.IsModernProtocol(r.Header.Get(mcp.HeaderProtocolVersion)) {
			body := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, limit), limit: limit}
			r.Body = body
			next.ServeHTTP(&limitWriter{ResponseWriter: w, body: body, refused: s.metrics.memoryRefused}, r)
			return
		}
		body, err := readBody(http.MaxBytesReader(w, r.Body, limit), r.ContentLength)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeTooLarge(w, limit)
				return
			}
			var be *budgetError
			if errors.As(err, &be) {
				if be.status == http.StatusServiceUnavailable {
					s.metrics.memoryRefused()
				}
				be.write(w)
				return
			}
			writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyKey{}, body)))
	})
}

func writeTooLarge(w http.ResponseWriter, limit int64) {
	writeError(w, http.StatusRequestEntityTooLarge, tooLargeMessage(limit))
}

func tooLargeMessage(limit int64) string {
	return fmt.Sprintf("request body exceeds the limit of %d bytes", limit)
}

// limitedBody records that reading the body hit the limit or the memory
// budget (budgetedBody), and how to answer it.
type limitedBody struct {
	io.ReadCloser
	limit   int64
	refusal atomic.Pointer[budgetError]
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		var mbe *http.MaxBytesError
		var be *budgetError
		switch {
		case errors.As(err, &mbe):
			b.refusal.CompareAndSwap(nil, &budgetError{status: http.StatusRequestEntityTooLarge, msg: tooLargeMessage(b.limit)})
		case errors.As(err, &be):
			b.refusal.CompareAndSwap(nil, be)
		}
	}
	return n, err
}

// limitWriter answers 413 (or the memory budget's refusal) in place of the
// response of a request whose body hit the limit (mcp-go reads the whole
// body before it writes anything).
type limitWriter struct {
	http.ResponseWriter
	body    *limitedBody
	refused func()    // counts a refusal by the memory budget
	started sync.Once // the response begins: the handler's, or the refusal
	dropped bool      // the refusal was written: drop the handler's response
}

func (w *limitWriter) start() {
	w.started.Do(func() {
		if refusal := w.body.refusal.Load(); refusal != nil {
			w.dropped = true
			if refusal.status == http.StatusServiceUnavailable {
				w.refused()
			}
			refusal.write(w.ResponseWriter)
		}
	})
}

func (w *limitWriter) WriteHeader(code int) {
	w.start()
	if !w.dropped {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *limitWriter) Write(p []byte) (int, error) {
	w.start()
	if w.dropped {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

func (w *limitWriter) Flush() {
	w.start()
	if f, ok := w.ResponseWriter.(http.Flusher); ok && !w.dropped {
		f.Flush()
	}
}

func (w *limitWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// checkSession refuses what mcp-go would accept but must not be:
//   - a session id created by another principal (404, as for an unknown id:
//     a session id never authenticates);
//   - a request of a revision with sessions that carries no session id and
//     is not initialize (400, as the spec says; mcp-go answers 404);
//   - an invalid Sandbox-Workspace header (400).
func (s *Server) checkSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := r.Header.Get(WorkspaceHeader); name != "" && !ValidWorkspaceName(name) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid %s header %q: use 1-64 characters from A-Z a-z 0-9 . _ -", WorkspaceHeader, name))
			return
		}
		principal, _ := principalFrom(r.Context())
		sid := r.Header.Get(server.HeaderKeySessionID)
		if sid != "" {
			if owner, ok := s.sessions.owner(sid); ok && owner != principal {
				s.log.Warn("refused a session id presented by another principal", "principal", principal)
				writeError(w, http.StatusNotFound, "session not found")
				return
			}
			defer s.sessions.enter(sid, principal)()
		}
		if sid == "" && needsSession(r) {
			writeError(w, http.StatusBadRequest, "missing "+server.HeaderKeySessionID+" header: send initialize first and then the session id it returned")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// needsSession reports whether r belongs to a protocol revision with
// sessions and is not the request that creates one.
func needsSession(r *http.Request) bool {
	header := r.Header.Get(mcp.HeaderProtocolVersion)
	if mcp.IsModernProtocol(header) {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodDelete:
		return true
	case http.MethodPost:
	default:
		return false
	}
	// limitBody buffered the body: no session id and no modern header.
	body, _ := r.Context().Value(bodyKey{}).([]byte)
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Meta *mcp.Meta `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil {
		return false // mcp-go answers malformed bodies itself
	}
	if mcp.IsModernProtocol(msg.Params.Meta.ProtocolVersion()) {
		return false
	}
	// Responses (no method) are matched by mcp-go; initialize creates the
	// session.
	return msg.Method != "" && msg.Method != string(mcp.MethodInitialize)
}

// statusRecorder remembers the status written; it keeps streaming (Flush)
// and deadlines (Unwrap) working.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(p)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		if r.status == 0 {
			r.status = http.StatusOK
		}
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// logRequests logs each request (debug level) and counts it by path and
// status.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		s.metrics.request(r.URL.Path, rec.status)
		s.log.Debug("http request", "method", r.Method, "path", r.URL.Path, "status", rec.status,
			"duration", time.Since(start), "remote", r.RemoteAddr)
	})
}

// writeError writes a JSON-RPC error body with an HTTP status, the form MCP
// clients can show.
func writeError(w http.ResponseWriter, status int, msg string) {
	code := -32000
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		code = mcp.INVALID_REQUEST
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{
		JSONRPC: mcp.JSONRPC_VERSION,
		Error:   errorDetail{Code: code, Message: msg},
	})
}

// errorBody is a JSON-RPC error response without an id.
type errorBody struct {
	JSONRPC string      `json:"jsonrpc"`
	ID      *int        `json:"id"` // always null: the request was not read
	Error   errorDetail `json:"error"`
}

type errorDetail struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

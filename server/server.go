// Package server is sandbox-mcp's MCP server: one *server.MCPServer built
// from a Config and the tool registry, served over stdio (ServeStdio) or
// streamable HTTP (Handler, ServeHTTP) by thin transports, with the HTTP
// middleware that a network-facing server needs (Origin allowlist, bearer
// tokens, body limits, metrics, health) and the binding of every tool call to
// a workspace key.
//
// # Workspaces
//
// Over stdio every call acts on Config.Workspace: a named workspace
// (--workspace NAME) survives restarts and is paused when stdin ends; an
// anonymous one is killed then.
//
// Over HTTP a call acts on a workspace of the authenticated principal
// ("local" when the server runs without tokens). A principal never reaches
// another principal's workspace, and a session id never authenticates: a
// request whose bearer token maps to another principal than the one that
// created the session is refused with 404.
//
//   - Clients of protocol revisions with sessions (2025-03-26 up to
//     2025-11-25, e.g. the TypeScript SDK and MCP Inspector) get an anonymous
//     workspace per MCP session (key "http:PRINCIPAL:session:ID"). It is
//     killed when the session ends: DELETE, or no request for
//     Config.SessionIdleTTL.
//   - Stateless clients (revision 2026-07-28: no initialize, no
//     Mcp-Session-Id) pick a named workspace per request with the
//     Sandbox-Workspace header; without it they share the principal's named
//     workspace "default" (key "http:PRINCIPAL:ws:default"). Named workspaces
//     are never killed by the server; they are paused after the idle-pause
//     time and resumed by the next call.
//   - A client with a session may send Sandbox-Workspace too; the session then
//     acts on that named workspace, which is paused (not killed) when the last
//     session that used it ends.
//
// So a stateless client that wants a workspace of its own sends, on every
// request:
//
//	Authorization: Bearer TOKEN
//	Sandbox-Workspace: NAME      (1-64 characters from A-Z a-z 0-9 . _ -)
//
// An invalid Sandbox-Workspace value is refused with 400.
//
// # HTTP endpoints
//
// /mcp is the MCP endpoint (POST, GET, DELETE). /healthz answers 200 "ok"
// without authentication. /metrics is the Prometheus text exposition (tool
// calls by tool and outcome, call durations, sandboxes by state, lifecycle
// counters, active HTTP sessions) and needs a token when tokens are
// configured.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// Defaults for Config fields left zero.
const (
	// DefaultMaxBodyBytes is the default request body limit: large enough for
	// a put_files call at the tools' default 64 MiB cap once base64-encoded.
	DefaultMaxBodyBytes = 96 << 20
	// DefaultShutdownTimeout is how long in-flight calls get on shutdown by
	// default before they are cancelled.
	DefaultShutdownTimeout = 15 * time.Second
	// DefaultMaxStdioMessageBytes is the default limit of a stdio message:
	// the official MCP TypeScript SDK's stdio client ends the session when
	// its read buffer (10 MiB by default) would exceed 10 MiB, which holds
	// the message and what follows it in the same read; 256 KiB less
	// leaves room for that.
	DefaultMaxStdioMessageBytes = 10<<20 - 256<<10
	// endSessionTimeout bounds applying the end-of-session policy to one
	// workspace (the Manager bounds each provider call on its own as well).
	endSessionTimeout = 2 * time.Minute
)

// Config configures a Server. Deps is required; everything else has a
// default.
type Config struct {
	// Name and Version are the server info sent to clients. Defaults
	// "sandbox-mcp" and "devel".
	Name, Version string
	// Deps carries the Manager, the tool limits and the logger
	// (tools.NewDeps). Required, with a Manager.
	Deps *tools.Deps
	// Tools are the tools served; nil means tools.Selected(Deps).
	Tools []tools.Tool
	// Logger receives the server's logs (stderr only). Nil means
	// Deps.Logger.
	Logger *slog.Logger

	// Workspace is the stdio session's workspace (--workspace NAME gives a
	// named one). An empty Key means a fresh anonymous workspace per Server.
	// It is also the workspace of in-process clients of MCP().
	Workspace tools.Workspace

	// AuthTokens maps bearer token to principal; nil or empty means no
	// authentication (allowed only on loopback, see CheckListen).
	AuthTokens map[string]string
	// AllowedOrigins are the exact origins (scheme://host[:port]) browsers
	// may call from; "*" allows any. A request without Origin is allowed.
	AllowedOrigins []string
	// MaxBodyBytes limits request bodies (413 beyond). Default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxConcurrentCalls bounds the tool calls one HTTP principal has
	// running at once; a call past it gets an isError result at once (it is
	// not queued). Default DefaultMaxConcurrentCalls.
	MaxConcurrentCalls int
	// MaxRequestMemory bounds the request bodies the HTTP server holds at
	// once over all principals and sessions (see memoryBudget): a request
	// that does not fit gets 503 with Retry-After, one that never fits 413.
	// Default DefaultMaxRequestMemory; negative means no budget.
	MaxRequestMemory int64
	// SessionIdleTTL ends HTTP sessions that had no request in flight and
	// none arriving for this long (the end-of-session policy then applies:
	// their anonymous sandboxes are killed). Zero never expires sessions, so
	// clients that vanish without DELETE leave their sandboxes to the idle
	// pause and the paused-sandbox reaper.
	SessionIdleTTL time.Duration
	// TLSCert and TLSKey are PEM files; when both are set ServeHTTP serves
	// TLS.
	TLSCert, TLSKey string
	// ShutdownTimeout is how long in-flight calls get when ServeHTTP's
	// context ends, before they are cancelled. Default
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// MaxStdioMessageBytes is the most bytes one tool result may take as a
	// stdio message: read_files returns less than its read cap when the
	// cap would not fit. Default DefaultMaxStdioMessageBytes; negative
	// means no limit.
	MaxStdioMessageBytes int64
}

// Server is sandbox-mcp's MCP server. Build it with New; serve it with
// ServeStdio or ServeHTTP (or mount Handler). It is safe for concurrent use.
type Server struct {
	cfg      Config
	log      *slog.Logger
	manager  *manage.Manager
	mcp      *server.MCPServer
	stdioWS  tools.Workspace
	toolSet  map[string]bool
	splits   map[string]bool // the tools whose calls are split (tools.SplitToolCall)
	metrics  *metrics
	sessions *sessionRegistry
	calls    *callLimiter  // HTTP calls in flight by principal
	budget   *memoryBudget // request bodies held, over all principals
	tokens   []tokenEntry
	origins  originPolicy

	httpMu     sync.Mutex // guards streamable and handler, built on first use
	streamable *server.StreamableHTTPServer
	handler    http.Handler
	inflight   inflight

	shutdownOnce sync.Once
	shutdownErr  error
}

// New builds the Server: the MCP server with tool capabilities, logging,
// instructions, panic recovery, metrics hooks and the workspace-binding tool
// middleware, and the tools registered (which validate their own arguments
// and outputs).
func New(cfg Config) (*Server, error) {
	if cfg.Deps == nil || cfg.Deps.Manager == nil {
		return nil, errors.New("server: Config.Deps with a Manager is required")
	}
	if cfg.Name == "" {
		cfg.Name = "sandbox-mcp"
	}
	if cfg.Version == "" {
		cfg.Version = "devel"
	}
	if cfg.Logger == nil {
		cfg.Logger = cfg.Deps.Logger
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxConcurrentCalls <= 0 {
		cfg.MaxConcurrentCalls = DefaultMaxConcurrentCalls
	}
	switch {
	case cfg.MaxRequestMemory == 0:
		cfg.MaxRequestMemory = DefaultMaxRequestMemory
	case cfg.MaxRequestMemory < 0:
		cfg.MaxRequestMemory = 0
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	switch {
	case cfg.MaxStdioMessageBytes == 0:
		cfg.MaxStdioMessageBytes = DefaultMaxStdioMessageBytes
	case cfg.MaxStdioMessageBytes < 0:
		cfg.MaxStdioMessageBytes = 0
	}
	if cfg.Tools == nil {
		ts, err := tools.Selected(cfg.Deps)
		if err != nil {
			return nil, err
		}
		cfg.Tools = ts
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, errors.New("server: TLS needs both a certificate and a key file")
	}
	tokens, err := newTokenEntries(cfg.AuthTokens)
	if err != nil {
		return nil, err
	}
	origins, err := newOriginPolicy(cfg.AllowedOrigins)
	if err != nil {
		return nil, err
	}
	ws := cfg.Workspace
	if ws.Key == "" {
		ws = tools.Workspace{Key: "stdio:anon:" + randomID()}
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		manager: cfg.Deps.Manager,
		stdioWS: ws,
		calls:   newCallLimiter(cfg.MaxConcurrentCalls),
		toolSet: map[string]bool{},
		splits:  map[string]bool{},
		tokens:  tokens,
		origins: origins,
	}
	for _, t := range cfg.Tools {
		s.toolSet[t.Def.Name] = true
		if t.SplitArguments {
			s.splits[t.Def.Name] = true
		}
	}
	s.budget = newMemoryBudget(cfg.MaxRequestMemory, countPrincipals(cfg.AuthTokens))
	s.metrics = newMetrics(s.toolSet)
	s.metrics.budget = s.budget
	s.sessions = newSessionRegistry(s.manager, cfg.Deps, s.log, cfg.SessionIdleTTL)

	hooks := &server.Hooks{}
	hooks.AddBeforeCallTool(s.metrics.beforeCall)
	hooks.AddAfterCallTool(s.metrics.afterCall)
	hooks.AddOnError(s.metrics.onError)

	s.mcp = server.NewMCPServer(cfg.Name, cfg.Version,
		server.WithToolCapabilities(false),
		server.WithLogging(),
		server.WithInstructions(tools.Instructions(cfg.Deps.Config)),
		// No WithInputSchemaValidation: the tools validate their own
		// arguments against the same schemas, with messages that name the
		// field ("invalid argument timeout_sec: got number, want integer")
		// where mcp-go's read like "/timeout_sec: &{Got:number …}". No
		// WithOutputSchemaValidation either: it decodes every result's
		// structuredContent again; the tools check their outputs
		// themselves (see tools' result).
		server.WithHooks(hooks),
		// mcp-go logs every request and tool call at info; that is debug
		// detail for sandbox-mcp (per-call numbers are in /metrics).
		server.WithLogger(slog.New(demoteInfo{s.log.Handler()})),
		// Outermost first: a panic anywhere below becomes a short isError
		// result, then the call is bound to its workspace.
		server.WithToolHandlerMiddleware(s.recoverPanics),
		server.WithToolHandlerMiddleware(s.bindWorkspace),
	)
	tools.Register(s.mcp, cfg.Tools)
	return s, nil
}

// splitsArguments reports whether calls of tool name have their arguments
// split off the message before mcp-go parses it.
func (s *Server) splitsArguments(name string) bool { return s.splits[name] }

// MCP returns the underlying mcp-go server (for in-process clients such as
// `sandbox-mcp call`; their calls act on Config.Workspace).
func (s *Server) MCP() *server.MCPServer { return s.mcp }

// StdioWorkspace returns the workspace stdio and in-process calls act on.
func (s *Server) StdioWorkspace() tools.Workspace { return s.stdioWS }

// recoverPanics turns a panicking tool handler into an isError result; the
// panic and its stack are logged, never shown to the model.
func (s *Server) recoverPanics(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("tool handler panicked", "tool", req.Params.Name, "panic", r, "stack", string(debug.Stack()))
				res, err = mcp.NewToolResultError(fmt.Sprintf("internal error in %s (logged on the server); the call may have partly run", req.Params.Name)), nil
			}
		}()
		return next(ctx, req)
	}
}

// bindWorkspace binds each call to its workspace: stdio and in-process calls
// to Config.Workspace, HTTP calls to the principal's session or named
// workspace. Calls whose context carries a notifyCounter (stdio, stateless
// HTTP) have their notifications flushed before their result.
func (s *Server) bindWorkspace(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		counter, counted := ctx.Value(notifyCounterKey{}).(*notifyCounter)
		hc, ok := ctx.Value(httpCallKey{}).(*httpCall)
		if !ok {
			ctx = tools.WithWorkspace(ctx, s.stdioWS)
			if counted {
				return s.flushNotifications(ctx, counter, req, next)
			}
			return next(ctx, req)
		}
		var sessionID string
		if cs := server.ClientSessionFromContext(ctx); cs != nil {
			sessionID = cs.SessionID()
		}
		leave, err := s.calls.enter(hc.principal)
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		defer leave()
		ws, done, err := s.sessions.bind(hc.principal, sessionID, hc.workspace)
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		defer done()
		ctx = tools.WithWorkspace(ctx, ws)
		// With a session the event store closes the gap (see notifyCounter).
		if counted && sessionID == "" {
			return s.flushNotifications(ctx, counter, req, next)
		}
		return next(ctx, req)
	}
}

// demoteInfo is a slog.Handler that turns info records into debug ones.
type demoteInfo struct{ slog.Handler }

func (h demoteInfo) Enabled(ctx context.Context, level slog.Level) bool {
	return h.Handler.Enabled(ctx, demote(level))
}

func (h demoteInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h demoteInfo) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoteInfo{h.Handler.WithAttrs(attrs)}
}

func (h demoteInfo) WithGroup(name string) slog.Handler { return demoteInfo{h.Handler.WithGroup(name)} }

func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

// randomID returns 128 random bits in hex.
func randomID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// countPrincipals is the number of distinct principals tokens map to.
func countPrincipals(tokens map[string]string) int {
	seen := map[string]bool{}
	for _, p := range tokens {
		seen[p] = true
	}
	return len(seen)
}

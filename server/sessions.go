package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// WorkspaceHeader is the request header that picks a named workspace over
// HTTP.
const WorkspaceHeader = "Sandbox-Workspace"

// DefaultWorkspaceName is the named workspace of stateless HTTP requests
// without a WorkspaceHeader.
const DefaultWorkspaceName = "default"

// SessionKey is the workspace key of an HTTP session's anonymous workspace.
func SessionKey(principal, sessionID string) string {
	return "http:" + principal + ":session:" + sessionID
}

// NamedKey is the workspace key of a principal's named HTTP workspace.
func NamedKey(principal, name string) string {
	return "http:" + principal + ":ws:" + name
}

// PrincipalOfKey returns the HTTP principal whose workspace key is key
// (made by SessionKey or NamedKey), or "" for other keys (stdio's), which no
// per-principal limit applies to. Principals contain no colon.
func PrincipalOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, "http:")
	if !ok {
		return ""
	}
	principal, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return principal
}

// ValidWorkspaceName reports whether name may name a workspace:
// 1-64 characters from A-Z a-z 0-9 . _ -, not only dots.
func ValidWorkspaceName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	dots := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return dots < len(name)
}

// sessionRegistry tracks the MCP sessions of revisions that have them: who
// created each (the principal it is bound to), which workspaces it used, and
// its activity. It implements mcp-go's SessionIdManagerResolver, so session
// ids are minted, validated and terminated here, and termination applies the
// end-of-session policy.
//
// A session is idle when none of its requests is in flight (a tool call, an
// open GET stream) and none arrived for the idle TTL. The registry's sweeper
// is the only one that ends idle sessions: mcp-go's (WithSessionIdleTTL)
// only looks at when requests arrived and releases a session's transport
// state even when Terminate refuses, which cut off calls and GET streams
// that outlived the TTL. When the registry ends an idle session it releases
// mcp-go's state of it through release.
type sessionRegistry struct {
	manager *manage.Manager
	deps    *tools.Deps
	log     *slog.Logger
	idleTTL time.Duration // 0: sessions never expire
	// release drops mcp-go's state of a session the sweeper ended (nil
	// until the HTTP handler is built).
	release func(id string)

	mu       sync.Mutex
	sessions map[string]*httpSession
	// namedUsers maps a named workspace key to the live sessions that used
	// it: it is paused when the last of them ends.
	namedUsers map[string]map[string]struct{}
	// closed: the server shuts down; the Manager's Shutdown applies the
	// policy to every workspace, so ending sessions no longer does.
	closed bool

	stopSweeper chan struct{}
	sweeperDone chan struct{}
}

type httpSession struct {
	principal string
	calls     int       // tool calls running
	inflight  int       // requests being served
	lastSeen  time.Time // when a request last arrived or ended
	ended     bool      // terminated (DELETE, idle expiry, shutdown)
	named     map[string]bool
}

func newSessionRegistry(m *manage.Manager, deps *tools.Deps, log *slog.Logger, idleTTL time.Duration) *sessionRegistry {
	return &sessionRegistry{
		manager:    m,
		deps:       deps,
		log:        log,
		idleTTL:    idleTTL,
		sessions:   map[string]*httpSession{},
		namedUsers: map[string]map[string]struct{}{},
	}
}

// startSweeper starts ending idle sessions (no-op without an idle TTL or when
// already started). Called with the Server's httpMu held.
func (r *sessionRegistry) startSweeper() {
	if r.idleTTL <= 0 || r.stopSweeper != nil {
		return
	}
	r.stopSweeper, r.sweeperDone = make(chan struct{}), make(chan struct{})
	every := min(max(r.idleTTL/2, 100*time.Millisecond), time.Minute)
	go func() {
		defer close(r.sweeperDone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-r.stopSweeper:
				return
			case <-t.C:
				r.sweep()
			}
		}
	}()
}

// stopSweeping stops the sweeper and waits for it.
func (r *sessionRegistry) stopSweeping() {
	if r.stopSweeper == nil {
		return
	}
	close(r.stopSweeper)
	<-r.sweeperDone
}

// sweep ends the idle sessions and releases mcp-go's state of them.
func (r *sessionRegistry) sweep() {
	now := time.Now()
	r.mu.Lock()
	var idle []string
	for id, sess := range r.sessions {
		if r.idleLocked(sess, now) {
			idle = append(idle, id)
		}
	}
	release := r.release
	r.mu.Unlock()
	for _, id := range idle {
		if ended, _ := r.terminate(id, "", endIdle); ended && release != nil {
			release(id)
		}
	}
}

func (r *sessionRegistry) idleLocked(sess *httpSession, now time.Time) bool {
	return r.idleTTL > 0 && sess.inflight == 0 && sess.calls == 0 && now.Sub(sess.lastSeen) >= r.idleTTL
}

// enter records a request of session id by principal arriving; the returned
// function records its end. Unknown or foreign ids are not tracked.
func (r *sessionRegistry) enter(id, principal string) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	sess, ok := r.sessions[id]
	if !ok || sess.principal != principal {
		return func() {}
	}
	sess.inflight++
	sess.lastSeen = time.Now()
	return func() {
		r.mu.Lock()
		sess.inflight--
		sess.lastSeen = time.Now()
		r.mu.Unlock()
	}
}

// errSessionNotFound is what a request gets for a session id it may not use;
// it does not say whether the id exists.
var errSessionNotFound = errors.New("session not found")

// create mints a session id for principal.
func (r *sessionRegistry) create(principal string) string {
	id := "mcp-session-" + randomID()
	r.mu.Lock()
	r.sessions[id] = &httpSession{principal: principal, named: map[string]bool{}, lastSeen: time.Now()}
	r.mu.Unlock()
	return id
}

// owner returns the principal that created session id.
func (r *sessionRegistry) owner(id string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sess, ok := r.sessions[id]
	if !ok {
		return "", false
	}
	return sess.principal, true
}

// count returns the number of live sessions.
func (r *sessionRegistry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// bind returns the workspace of a call by principal in session sessionID
// ("" for stateless requests) with the Sandbox-Workspace header name ("" when
// absent; checkSession refused invalid ones), and a function to call when
// the call ends.
func (r *sessionRegistry) bind(principal, sessionID, name string) (tools.Workspace, func(), error) {
	if sessionID == "" {
		if name == "" {
			name = DefaultWorkspaceName
		}
		return tools.Workspace{Key: NamedKey(principal, name), Named: true}, func() {}, nil
	}
	r.mu.Lock()
	sess, ok := r.sessions[sessionID]
	if !ok || sess.ended || sess.principal != principal {
		r.mu.Unlock()
		return tools.Workspace{}, nil, fmt.Errorf("MCP session %s has ended or is not yours; start a new session", sessionID)
	}
	sess.calls++
	ws := tools.Workspace{Key: SessionKey(principal, sessionID)}
	if name != "" {
		ws = tools.Workspace{Key: NamedKey(principal, name), Named: true}
		sess.named[ws.Key] = true
		users := r.namedUsers[ws.Key]
		if users == nil {
			users = map[string]struct{}{}
			r.namedUsers[ws.Key] = users
		}
		users[sessionID] = struct{}{}
	}
	r.mu.Unlock()
	done := func() {
		r.mu.Lock()
		sess.calls--
		reapply := sess.ended && !r.closed && (!ws.Named || len(r.namedUsers[ws.Key]) == 0)
		r.mu.Unlock()
		// The session ended while this call ran: the call may have made or
		// resumed the workspace after termination applied the policy, so
		// apply it again (at shutdown the Manager's Shutdown does).
		if reapply {
			r.endWorkspace(ws.Key)
		}
	}
	return ws, done, nil
}

// endReason says who ends a session, which decides whether it may.
type endReason int

const (
	// endByClient: DELETE. Only the principal that created the session may.
	endByClient endReason = iota
	// endIdle: the idle sweeper. Only an idle session ends.
	endIdle
)

func (r endReason) String() string {
	switch r {
	case endByClient:
		return "deleted by the client"
	case endIdle:
		return "idle"
	}
	return "unknown"
}

// terminate ends session id, if the reason allows: its anonymous workspace
// is killed and the named workspaces no other live session uses are paused.
// It reports whether the session ended, and whether the reason was refused
// (a foreign principal, a busy session). Unknown ids are a no-op.
func (r *sessionRegistry) terminate(id, principal string, why endReason) (ended, refused bool) {
	r.mu.Lock()
	sess, ok := r.sessions[id]
	if !ok {
		r.mu.Unlock()
		return false, false
	}
	switch why {
	case endByClient:
		if sess.principal != principal {
			r.mu.Unlock()
			return false, true
		}
	case endIdle:
		if !r.idleLocked(sess, time.Now()) {
			r.mu.Unlock()
			return false, true
		}
	}
	delete(r.sessions, id)
	sess.ended = true
	keys := []string{SessionKey(sess.principal, id)}
	for key := range sess.named {
		users := r.namedUsers[key]
		delete(users, id)
		if len(users) == 0 {
			delete(r.namedUsers, key)
			keys = append(keys, key)
		}
	}
	r.mu.Unlock()
	r.log.Debug("MCP session ended", "session", id, "principal", sess.principal, "reason", why)
	for _, key := range keys {
		r.endWorkspace(key)
	}
	return true, false
}

// closeAll forgets every session (server shutdown) without applying the
// end-of-session policy: the Manager's Shutdown, which follows, applies it
// to every workspace once.
func (r *sessionRegistry) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for id, sess := range r.sessions {
		sess.ended = true
		delete(r.sessions, id)
	}
	clear(r.namedUsers)
}

// endWorkspace applies the end-of-session policy to key (a named workspace
// is paused, an anonymous one killed) and frees the tools' state of it.
func (r *sessionRegistry) endWorkspace(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), endSessionTimeout)
	defer cancel()
	if err := r.manager.EndSession(ctx, key); err != nil && !errors.Is(err, manage.ErrClosed) {
		r.log.Warn("could not apply the end-of-session policy", "workspace", key, "err", err)
	}
	r.deps.EndSession(key)
}

// ResolveSessionIdManager implements server.SessionIdManagerResolver: the
// manager it returns is bound to the request's principal. A nil request
// (mcp-go's CloseSessions, at shutdown, after closeAll) gets an unbound one,
// whose Terminate ends only idle sessions.
func (r *sessionRegistry) ResolveSessionIdManager(req *http.Request) server.SessionIdManager {
	if req == nil {
		return &sessionIDs{reg: r, unbound: true}
	}
	p, _ := principalFrom(req.Context())
	return &sessionIDs{reg: r, principal: p}
}

// sessionIDs is the registry seen by one request's principal.
type sessionIDs struct {
	reg       *sessionRegistry
	principal string
	unbound   bool
}

// Generate implements server.SessionIdManager.
func (m *sessionIDs) Generate() string { return m.reg.create(m.principal) }

// Validate implements server.SessionIdManager: unknown, ended and foreign ids
// are errors (mcp-go answers 404).
func (m *sessionIDs) Validate(id string) (isTerminated bool, err error) {
	owner, ok := m.reg.owner(id)
	if !ok || (!m.unbound && owner != m.principal) {
		return false, fmt.Errorf("%w: %q", errSessionNotFound, id)
	}
	return false, nil
}

// Terminate implements server.SessionIdManager; it applies the
// end-of-session policy before returning.
func (m *sessionIDs) Terminate(id string) (isNotAllowed bool, err error) {
	why := endByClient
	if m.unbound {
		why = endIdle
	}
	_, refused := m.reg.terminate(id, m.principal, why)
	return refused, nil
}

var _ server.SessionIdManagerResolver = (*sessionRegistry)(nil)

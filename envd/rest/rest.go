//go:build linux

// Package rest serves envd's plain-HTTP endpoints, wire-compatible with E2B's
// envd: GET /health, GET and POST /files (download and upload), POST
// /files/compose, GET /envs and GET /metrics.
//
// Every error is JSON {"code": <status>, "message": "<text>"} written by
// WriteError. The daemon's middleware checks X-Access-Token on every path
// except /health and /files; /files checks its own auth (the token header or
// a signed URL, see Signature) because E2B's SDKs hand out signed download and
// upload URLs that carry no header.
package rest

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/fsrpc"
	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
)

// Options configures New.
type Options struct {
	// Paths resolves every client path. Required.
	Paths *paths.Resolver
	// Users maps the `username` query parameter to a user. Unknown names act
	// as the daemon's own user (identity.Resolver logs the substitution);
	// nil means identity.NewResolver with its defaults.
	Users *identity.Resolver
	// AccessToken, when set, is required on /files: as the X-Access-Token
	// header or as a valid signature. Empty means /files needs no auth.
	AccessToken string
	// Env is served by GET /envs. Nil serves {}.
	Env map[string]string
	// MaxUploadBytes caps each request body of POST /files, both as sent and
	// after gzip decoding; over it the reply is 413. 0 means unlimited.
	MaxUploadBytes int64
	// Logger receives server-side failures. Nil means slog.Default().
	Logger *slog.Logger
}

type server struct {
	paths     *paths.Resolver
	users     *identity.Resolver
	token     string
	env       map[string]string
	maxUpload int64
	log       *slog.Logger
	cpu       cpuSampler
}

// New returns the handler for envd's REST endpoints. Paths not served reply
// 404 and wrong methods 405, both as JSON. It panics if opts.Paths is nil, a
// programming error. The handler is safe for concurrent use.
func New(opts Options) http.Handler {
	if opts.Paths == nil {
		panic("rest.New: Options.Paths is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	users := opts.Users
	if users == nil {
		users = identity.NewResolver(identity.ResolverOptions{Logger: log})
	}
	env := opts.Env
	if env == nil {
		env = map[string]string{}
	}
	return &server{
		paths:     opts.Paths,
		users:     users,
		token:     opts.AccessToken,
		env:       env,
		maxUpload: max(opts.MaxUploadBytes, 0),
		log:       log,
	}
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	post := r.Method == http.MethodPost
	switch r.URL.Path {
	case "/health":
		if !get {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		s.health(w)
	case "/files":
		switch {
		case get:
			s.download(w, r)
		case post:
			s.upload(w, r)
		default:
			methodNotAllowed(w, r, "GET, HEAD, POST")
		}
	case "/files/compose":
		if !post {
			methodNotAllowed(w, r, "POST")
			return
		}
		s.compose(w, r)
	case "/envs":
		if !get {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		// As E2B's envd: a JSON object (never null), not cached.
		env := s.env
		if env == nil {
			env = map[string]string{}
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(env)
	case "/metrics":
		if !get {
			methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		s.metrics(w)
	default:
		WriteError(w, http.StatusNotFound, fmt.Sprintf("no endpoint at %q", r.URL.Path))
	}
}

func (s *server) health(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
}

// errorBody is the one error shape of every endpoint.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// WriteError writes the JSON error {"code": status, "message": msg} with
// Content-Type "application/json; charset=utf-8". Headers describing a body
// that was meant to be sent (Content-Length, Content-Encoding) are dropped.
func WriteError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Del("Content-Encoding")
	h.Del("Content-Disposition")
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// httpError is an error that knows its HTTP status; the message names the
// failing value.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// fail writes err as the JSON error; errors without a status are 500s and
// are logged.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	if errors.As(err, &he) {
		if he.status == http.StatusInternalServerError {
			s.log.Error("envd request failed", "method", r.Method, "path", r.URL.Path, "status", he.status, "error", he.msg)
		}
		WriteError(w, he.status, he.msg)
		return
	}
	s.log.Error("envd request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	WriteError(w, http.StatusInternalServerError, err.Error())
}

// resolve maps a client path to a host path: 400 for malformed paths, 403
// for paths outside the root (see fsrpc.PathError).
func (s *server) resolve(p string, u identity.User) (string, error) {
	abs, err := s.paths.Resolve(p, u)
	if err != nil {
		ce := fsrpc.PathError(err, p)
		return "", errorf(statusOf(ce.Code()), "%s", ce.Message())
	}
	return abs, nil
}

// statuses maps the Connect codes of filesystem errors (fsrpc.CodeOf,
// fsrpc.PathError) to HTTP statuses; codes not listed are 500.
var statuses = map[connect.Code]int{
	connect.CodeNotFound:           http.StatusNotFound,
	connect.CodeAlreadyExists:      http.StatusConflict,
	connect.CodePermissionDenied:   http.StatusForbidden,
	connect.CodeInvalidArgument:    http.StatusBadRequest,
	connect.CodeFailedPrecondition: http.StatusBadRequest,
	connect.CodeResourceExhausted:  http.StatusInsufficientStorage,
}

func statusOf(code connect.Code) int {
	if status, ok := statuses[code]; ok {
		return status
	}
	return http.StatusInternalServerError
}

// printableASCII reports whether s holds only bytes in [lo, '~'].
func printableASCII(s string, lo byte) bool {
	for i := range len(s) {
		if s[i] < lo || s[i] > '~' {
			return false
		}
	}
	return true
}

// quoteShort quotes s for a message, cut when long: messages name the
// failing value without echoing kilobytes back.
func quoteShort(s string) string {
	const maxLen = 80
	if len(s) > maxLen {
		return strconv.Quote(s[:maxLen]) + "…"
	}
	return strconv.Quote(s)
}

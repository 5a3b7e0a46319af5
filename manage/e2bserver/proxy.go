package e2bserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// route is where a proxied request goes, as its Host or headers say.
type route struct {
	id   string
	port string
	// bad is the 400 message when the id or port is malformed ("" when
	// well formed).
	bad string
}

// routeOf tells envd proxy traffic from management API calls, as E2B's
// proxy routes: with Host sandbox.*, localhost or an IP literal the
// E2b-Sandbox-Id and E2b-Sandbox-Port headers say where (a request there
// without E2b-Sandbox-Id, other than to sandbox.*, is an API call); any
// other Host whose leftmost label is PORT-ID is that sandbox's port.
func routeOf(r *http.Request) (route, bool) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	id := r.Header.Get(e2bapi.HeaderSandboxID)
	if strings.HasPrefix(host, "sandbox.") || host == "localhost" || net.ParseIP(host) != nil {
		if id == "" && !strings.HasPrefix(host, "sandbox.") {
			return route{}, false
		}
		return checkRoute(id, r.Header.Get(e2bapi.HeaderSandboxPort)), true
	}
	label, _, _ := strings.Cut(host, ".")
	port, rest, ok := strings.Cut(label, "-")
	if !ok || port == "" || strings.Trim(port, "0123456789") != "" {
		return route{}, false
	}
	// The id as sent: Host names are case-insensitive on the wire, but
	// E2B's ids are lowercase and anything else is refused.
	rawLabel, _, _ := strings.Cut(r.Host, ".")
	if _, rawID, ok := strings.Cut(rawLabel, "-"); ok {
		rest = rawID
	}
	return checkRoute(rest, port), true
}

// checkRoute validates an id and a port.
func checkRoute(id, port string) route {
	rt := route{id: id, port: port}
	switch {
	case !validID(id):
		rt.bad = "Invalid sandbox ID"
	case !validPort(port):
		rt.bad = "Invalid sandbox port"
	}
	return rt
}

// validPort reports whether p is a TCP port number.
func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 65536 && strconv.Itoa(n) == p
}

// internalPaths are envd endpoints of E2B's control plane, which its
// public proxy refuses.
var internalPaths = map[string]bool{
	"/init": true, "/freeze": true, "/unfreeze": true, "/collapse": true, "/fsfreeze": true, "/fsthaw": true,
}

// envdUnauthorized is envd's body for a missing or wrong access token.
const envdUnauthorized = "unauthorized access, please provide a valid access token or method signing if supported"

// proxyBrokenMessage is the 502 message for a request to envd that failed
// after it may have been sent.
const proxyBrokenMessage = "The connection to the sandbox failed"

// proxyTarget is the way to one sandbox's envd.
type proxyTarget struct {
	client *envdclient.Client
	proxy  *httputil.ReverseProxy
}

// writeProxyError writes E2B's proxy body for a sandbox it cannot reach.
func writeProxyError(w http.ResponseWriter, id string, port int) {
	msg := e2bapi.ProxyNotFoundMessage
	if port != 0 {
		msg = "The sandbox is running but port is not open"
	}
	writeJSON(w, http.StatusBadGateway, e2bapi.ProxyError{SandboxID: id, Message: msg, Port: port, Code: http.StatusBadGateway})
}

// serveProxy forwards a request to a sandbox's envd: malformed routes get
// 400 and reach nothing; a gone, expiring or paused sandbox (without
// autoResume) gets E2B's 502; a secure sandbox needs its access token; a
// paused one with autoResume is resumed first.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, rt route) {
	if rt.bad != "" {
		writeJSON(w, http.StatusBadRequest, e2bapi.Error{Code: http.StatusBadRequest, Message: rt.bad})
		return
	}
	if internalPaths[r.URL.Path] {
		writeJSON(w, http.StatusNotFound, e2bapi.Error{Code: http.StatusNotFound,
			Message: "This endpoint is reserved for the E2B control plane and is not available through the proxy"})
		return
	}
	s.mu.Lock()
	b := s.boxes[rt.id]
	var rec record
	if b != nil {
		rec = b.rec
	}
	killing := b != nil && b.killing
	s.mu.Unlock()
	// A caller that names an API key must own the sandbox (SDKs send
	// none to envd; a key that is not the owner's learns nothing).
	if b != nil && r.Header.Get(e2bapi.HeaderAPIKey) != "" {
		if owner, ok := s.authenticate(r); !ok || owner != rec.Owner {
			b = nil
		}
	}
	if b == nil || killing || (rec.State == e2bapi.StatePaused && !rec.AutoResume) {
		writeProxyError(w, rt.id, 0)
		return
	}
	if rec.Secure && !tokenAllows(r, rec.Token) {
		writeJSON(w, http.StatusUnauthorized, e2bapi.Error{Code: http.StatusUnauthorized, Message: envdUnauthorized})
		return
	}
	if rt.port != strconv.Itoa(e2bapi.EnvdPort) {
		port, _ := strconv.Atoi(rt.port)
		writeProxyError(w, rt.id, port)
		return
	}
	if rec.State == e2bapi.StatePaused {
		if !s.autoResume(r.Context(), b) {
			writeProxyError(w, rt.id, 0)
			return
		}
	}
	t, err := s.target(r.Context(), b)
	if err != nil {
		s.log.Warn("proxy: no envd endpoint", "sandbox", rt.id, "err", err)
		writeProxyError(w, rt.id, 0)
		return
	}
	t.proxy.ServeHTTP(w, r)
}

// autoResume resumes a paused sandbox for proxy traffic, with its original
// timeout; false when it is gone or could not be resumed.
func (s *Server) autoResume(ctx context.Context, b *sandbox) bool {
	b.op.Lock()
	defer b.op.Unlock()
	if !s.present(b) {
		return false
	}
	if s.stateOf(b) == e2bapi.StateRunning {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, providerTimeout)
	defer cancel()
	s.mu.Lock()
	ttl := b.rec.Timeout
	s.mu.Unlock()
	if err := s.resume(ctx, b, ttl); err != nil {
		s.log.Warn("proxy: auto-resume failed", "sandbox", b.rec.ID, "err", err)
		return false
	}
	return true
}

// tokenAllows checks a secure sandbox's access token: X-Access-Token (in
// constant time) on every request, except GET /health (exempt in envd)
// and /files, which may instead carry envd's v1 signature.
func tokenAllows(r *http.Request, token string) bool {
	if r.Method == http.MethodGet && r.URL.Path == "/health" {
		return true
	}
	if got := r.Header.Get(e2bapi.HeaderAccessToken); got != "" {
		return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
	}
	if r.URL.Path == "/files" {
		return signatureAllows(r, token)
	}
	return false
}

// signatureAllows checks envd's /files signature:
// "v1_" + unpadded base64(sha256("path:operation:username:token[:expiration]")).
func signatureAllows(r *http.Request, token string) bool {
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return false
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	msg := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + token
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || time.Now().Unix() > n {
			return false
		}
		msg += ":" + exp
	}
	sum := sha256.Sum256([]byte(msg))
	want := "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
}

// strippedHeaders never reach envd: the proxy's own credentials and
// routing.
var strippedHeaders = []string{e2bapi.HeaderAccessToken, e2bapi.HeaderAPIKey, e2bapi.HeaderSandboxID, e2bapi.HeaderSandboxPort}

// target returns (making it once) the reverse proxy to b's envd, at the
// endpoint the provider gives, through an envd client (so the provider's
// checks, such as the local provider's socket check, apply to every
// connection). Nothing a sandbox can write decides where it dials.
func (s *Server) target(ctx context.Context, b *sandbox) (*proxyTarget, error) {
	s.mu.Lock()
	t := s.targets[b.rec.ID]
	providerID := b.rec.ProviderID
	s.mu.Unlock()
	if t != nil {
		return t, nil
	}
	ep, err := s.provider.Endpoint(ctx, providerID)
	if err != nil {
		return nil, err
	}
	opts := append([]envdclient.Option{}, ep.ClientOptions...)
	if ep.AccessToken != "" {
		opts = append(opts, envdclient.WithAccessToken(ep.AccessToken))
	}
	if ep.RoutingID != "" {
		opts = append(opts, envdclient.WithSandboxRouting(ep.RoutingID, ep.RoutingPort))
	}
	c, err := envdclient.New(ep.URL, opts...)
	if err != nil {
		return nil, err
	}
	base, err := url.Parse(c.Endpoint())
	if err != nil {
		c.Close()
		return nil, err
	}
	id := b.rec.ID
	t = &proxyTarget{client: c}
	t.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Host = ""
			for _, h := range strippedHeaders {
				pr.Out.Header.Del(h)
			}
		},
		Transport:     c.HTTPClient().Transport,
		FlushInterval: -1, // streams flow: every write is flushed
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(r.Context().Err(), context.Canceled) {
				return
			}
			s.log.Debug("proxy: envd unreachable", "sandbox", id, "err", err)
			s.lost(context.WithoutCancel(r.Context()), b)
			if !envdclient.IsNotSent(err) {
				// The request may have reached envd: not E2B's "not
				// found", which says it reached no sandbox.
				writeJSON(w, http.StatusBadGateway, e2bapi.ProxyError{SandboxID: id, Message: proxyBrokenMessage, Code: http.StatusBadGateway})
				return
			}
			writeProxyError(w, id, 0)
		},
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boxes[id] != b {
		c.Close()
		return nil, errors.New("sandbox " + id + " is gone")
	}
	if old := s.targets[id]; old != nil {
		c.Close()
		return old, nil
	}
	s.targets[id] = t
	return t, nil
}

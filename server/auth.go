package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// LocalPrincipal is the principal of every HTTP request when the server runs
// without tokens.
const LocalPrincipal = "local"

// LoadTokens reads a tokens file: one "TOKEN PRINCIPAL" per line, separated
// by spaces or tabs; blank lines and lines starting with '#' are ignored. A
// malformed line or a token given twice is an error naming the line (never
// the token). Principals are 1-128 characters from A-Z a-z 0-9 . _ - @ +;
// several tokens may map to one principal.
func LoadTokens(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	tokens := map[string]string{}
	firstLine := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("tokens file %s line %d: want \"TOKEN PRINCIPAL\", got %d fields", path, n, len(fields))
		}
		tok, principal := fields[0], fields[1]
		if !validPrincipal(principal) {
			return nil, fmt.Errorf("tokens file %s line %d: invalid principal %q: use 1-128 characters from A-Z a-z 0-9 . _ - @ +", path, n, principal)
		}
		if first, dup := firstLine[tok]; dup {
			return nil, fmt.Errorf("tokens file %s line %d: duplicate token (first on line %d)", path, n, first)
		}
		firstLine[tok] = n
		tokens[tok] = principal
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return tokens, nil
}

// validPrincipal reports whether p may be a principal. Principals are part of
// workspace keys, so ':' (the key separator) is excluded.
func validPrincipal(p string) bool {
	if len(p) == 0 || len(p) > 128 {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '-', c == '@', c == '+':
		default:
			return false
		}
	}
	return true
}

// CheckListen refuses a listen address that is not loopback when no tokens
// are configured: HTTP trusts nobody, so only a local-only server may run
// without authentication. "localhost", loopback IPs and "unix:" paths are
// local; an empty host (all interfaces) is not.
func CheckListen(addr string, tokens map[string]string) error {
	if len(tokens) > 0 || strings.HasPrefix(addr, "unix:") {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if isLoopback(host) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %q without authentication: a non-loopback address needs bearer tokens (--auth-tokens-file); for local use listen on 127.0.0.1", addr)
}

// tokenEntry is a configured token, kept only as its SHA-256 digest.
type tokenEntry struct {
	digest    [sha256.Size]byte
	principal string
}

func newTokenEntries(tokens map[string]string) ([]tokenEntry, error) {
	out := make([]tokenEntry, 0, len(tokens))
	for tok, p := range tokens {
		if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
			return nil, fmt.Errorf("server: an auth token is empty or contains white space (principal %q)", p)
		}
		if !validPrincipal(p) {
			return nil, fmt.Errorf("server: invalid principal %q: use 1-128 characters from A-Z a-z 0-9 . _ - @ +", p)
		}
		out = append(out, tokenEntry{digest: sha256.Sum256([]byte(tok)), principal: p})
	}
	return out, nil
}

// lookupToken returns the principal of tok. It compares digests in constant
// time and always looks at every entry, so timing reveals nothing about
// which bytes matched.
func (s *Server) lookupToken(tok string) (string, bool) {
	d := sha256.Sum256([]byte(tok))
	principal, found := "", false
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(d[:], s.tokens[i].digest[:]) == 1 {
			principal, found = s.tokens[i].principal, true
		}
	}
	return principal, found
}

type principalKey struct{}

func withPrincipal(ctx context.Context, p string) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// principalFrom returns the authenticated principal of a request context.
func principalFrom(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok
}

// authenticate requires a valid bearer token when tokens are configured and
// puts the principal in the request context (LocalPrincipal without tokens).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.tokens) == 0 {
			next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), LocalPrincipal)))
			return
		}
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		tok = strings.TrimSpace(tok)
		if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-mcp"`)
			writeError(w, http.StatusUnauthorized, "missing bearer token: send Authorization: Bearer TOKEN")
			return
		}
		principal, ok := s.lookupToken(tok)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-mcp", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "invalid bearer token")
			return
		}
		next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), principal)))
	})
}

// originPolicy is the Origin allowlist.
type originPolicy struct {
	any     bool
	allowed map[string]bool
}

func newOriginPolicy(origins []string) (originPolicy, error) {
	p := originPolicy{allowed: map[string]bool{}}
	for _, o := range origins {
		o = strings.TrimSpace(o)
		switch o {
		case "":
			continue
		case "*":
			p.any = true
			continue
		}
		norm, err := normalizeOrigin(o)
		if err != nil {
			return originPolicy{}, err
		}
		p.allowed[norm] = true
	}
	return p, nil
}

// normalizeOrigin turns a configured origin into the form browsers send:
// lower-case scheme and host, default port dropped.
func normalizeOrigin(o string) (string, error) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("server: allowed origin %q: want scheme://host[:port]", o)
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		return scheme + "://" + host + ":" + port, nil
	}
	return scheme + "://" + host, nil
}

// checkHost refuses (403) a request that came in on a loopback connection
// with a Host that is not loopback: a DNS-rebinding page reaching a local
// server. mcp-go checks this for /mcp; this covers /metrics and /healthz too.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		if ok && local != nil && isLoopback(local.String()) && !isLoopback(r.Host) {
			writeError(w, http.StatusForbidden, fmt.Sprintf("host %q is not allowed on a loopback address", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isLoopback reports whether addr (host or host:port) is localhost or a
// loopback IP.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// corsAllowHeaders are the request headers browser clients of an allowed
// origin may send.
const corsAllowHeaders = "Authorization, Content-Type, Accept, Last-Event-ID, Mcp-Session-Id, Mcp-Protocol-Version, Mcp-Method, Mcp-Name, " + WorkspaceHeader

// checkOrigin refuses (403) a request whose Origin header is present and not
// allowed, whatever its method; requests without Origin (non-browser
// clients) pass. For an allowed origin it adds the CORS headers a browser
// client needs (on errors too, so it can read a 401) and answers CORS
// preflights itself, before authentication: browsers never send
// credentials on a preflight.
func (s *Server) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		if !s.origins.any && !s.origins.allowed[strings.ToLower(origin)] {
			writeError(w, http.StatusForbidden, fmt.Sprintf("origin %q is not allowed", origin))
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Expose-Headers", "Mcp-Session-Id, WWW-Authenticate")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Package egress is the filtering proxy a sandbox with an allow-list network
// policy (--network allow=HOST[:PORT],...) reaches the network through: an
// HTTP proxy serving CONNECT tunnels and plain-HTTP forwarding, which lets a
// request through only when its host and port are on the list and the
// address it dials is one the list permits.
//
// Names are matched as the client wrote them; the proxy then resolves the
// name itself and dials the address it checked, never the name, so a name
// that resolves (or rebinds) to a loopback, private or link-local address is
// refused unless the allow list names that very address. Every refusal is
// logged and answered with HTTP 403, whose reason phrase and body carry
// RefusalMarker and the refused destination, and whose RefusalHeader is
// set, so that a tool reading a command's output can tell the policy
// refused it.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/netcopy"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// RefusalMarker opens the reason phrase and the body of every refusal:
// "403 sandbox-mcp egress policy refused HOST:PORT".
const RefusalMarker = "sandbox-mcp egress policy refused"

// RefusalHeader is set ("refused") on every refusal.
const RefusalHeader = "X-Sandbox-Mcp-Egress"

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Proxy is one sandbox's filtering proxy. It is safe for concurrent use.
type Proxy struct {
	policy      manage.NetworkPolicy
	log         *slog.Logger
	resolver    Resolver
	dialTimeout time.Duration
	forward     *httputil.ReverseProxy
	server      *http.Server

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	closed  bool
}

// Option configures a Proxy.
type Option func(*Proxy)

// WithLogger sets the logger refusals are logged to (default slog.Default()).
func WithLogger(log *slog.Logger) Option { return func(p *Proxy) { p.log = log } }

// WithResolver sets how host names are resolved (default net.DefaultResolver).
func WithResolver(r Resolver) Option { return func(p *Proxy) { p.resolver = r } }

// WithDialTimeout bounds each connection attempt upstream (default 15 seconds).
func WithDialTimeout(d time.Duration) Option { return func(p *Proxy) { p.dialTimeout = d } }

// New returns the proxy enforcing policy, which must be an allow policy.
func New(policy manage.NetworkPolicy, opts ...Option) (*Proxy, error) {
	if !policy.IsAllow() {
		return nil, fmt.Errorf("egress proxy: want an allow policy, got %s", policy)
	}
	if err := policy.Check(); err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	p := &Proxy{
		policy: policy, log: slog.Default(), resolver: net.DefaultResolver, dialTimeout: 15 * time.Second,
		tunnels: map[net.Conn]struct{}{},
	}
	for _, o := range opts {
		o(p)
	}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           func(ctx context.Context, _, addr string) (net.Conn, error) { return p.dialChecked(ctx, addr) },
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
		ForceAttemptHTTP2:     false,
	}
	p.forward = &httputil.ReverseProxy{
		// The absolute URI decides where the request goes; the Host header
		// the client sent is replaced by its host (RFC 9112, 3.2.2).
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL = r.In.URL
			r.Out.Host = ""
			r.Out.Header.Del("Proxy-Authorization")
			r.Out.Header.Del("Proxy-Connection")
		},
		Transport: transport,
		ErrorLog:  slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var refused *refusal
			if errors.As(err, &refused) {
				p.refuse(w, r, refused)
				return
			}
			p.log.Info("egress proxy: upstream failed", "method", r.Method, "url", r.URL.String(), "err", err)
			http.Error(w, "sandbox-mcp egress proxy: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)}
	return p, nil
}

// Serve answers proxy requests on ln until Close; it returns nil after Close.
func (p *Proxy) Serve(ln net.Listener) error {
	err := p.server.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops the proxy: its listeners, its connections and its tunnels.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.forward.Transport.(*http.Transport).CloseIdleConnections()
	return p.server.Close()
}

// ServeHTTP handles one proxy request: CONNECT, or a plain-HTTP request with
// an absolute http:// URI.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" {
		http.Error(w, "sandbox-mcp egress proxy: this is an HTTP proxy; send an absolute URI (http://host/path) or CONNECT host:port", http.StatusBadRequest)
		return
	}
	if r.URL.Scheme != "http" {
		http.Error(w, fmt.Sprintf("sandbox-mcp egress proxy: scheme %q is not proxied in plain form; use CONNECT for https", r.URL.Scheme), http.StatusBadRequest)
		return
	}
	host, port, err := splitTarget(r.URL.Host, 80)
	if err != nil {
		http.Error(w, "sandbox-mcp egress proxy: "+err.Error(), http.StatusBadRequest)
		return
	}
	// Checked here for a clear answer; the dial checks again (and dials
	// only what it checked).
	if _, err := p.allowedAddrs(r.Context(), host, port); err != nil {
		var refused *refusal
		if errors.As(err, &refused) {
			p.refuse(w, r, refused)
			return
		}
		http.Error(w, "sandbox-mcp egress proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	p.forward.ServeHTTP(w, r)
}

// connect serves a CONNECT request: checks the target, dials it and splices
// the client's connection to it.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	authority := r.URL.Host
	if authority == "" {
		authority = r.Host
	}
	host, port, err := splitTarget(authority, 0)
	if err != nil {
		http.Error(w, "sandbox-mcp egress proxy: CONNECT "+err.Error(), http.StatusBadRequest)
		return
	}
	upstream, err := p.dialChecked(r.Context(), net.JoinHostPort(host, strconv.Itoa(int(port))))
	if err != nil {
		var refused *refusal
		if errors.As(err, &refused) {
			p.refuse(w, r, refused)
			return
		}
		http.Error(w, "sandbox-mcp egress proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = upstream.Close()
		http.Error(w, "sandbox-mcp egress proxy: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if !p.track(client, upstream) {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	defer p.untrack(client, upstream)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	netcopy.Join(client, buf.Reader, upstream)
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range conns {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.tunnels, c)
	}
}

// refusal is why the policy refused a destination.
type refusal struct {
	target string // host:port as requested
	reason string
}

func (r *refusal) Error() string { return RefusalMarker + " " + r.target + ": " + r.reason }

// refuse logs the refusal and answers it with 403, RefusalMarker and the
// target in the reason phrase (which clients print for a failed CONNECT)
// and the reason in the body.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, why *refusal) {
	p.log.Warn("egress refused", "method", r.Method, "target", why.target, "reason", why.reason, "policy", p.policy.String())
	body := fmt.Sprintf("%s %s: %s (the sandbox's network policy is %s)\n", RefusalMarker, why.target, why.reason, p.policy)
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		w.Header().Set(RefusalHeader, "refused")
		http.Error(w, body, http.StatusForbidden)
		return
	}
	defer func() { _ = conn.Close() }()
	_, _ = fmt.Fprintf(buf, "HTTP/1.1 403 %s %s\r\n%s: refused\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		RefusalMarker, why.target, RefusalHeader, len(body), body)
	_ = buf.Flush()
}

// splitTarget splits a request's host[:port] (port defaultPort when absent;
// 0: required), lowercases the host and drops brackets and a trailing dot.
func splitTarget(hostport string, defaultPort uint16) (string, uint16, error) {
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		if defaultPort == 0 {
			return "", 0, fmt.Errorf("%q: want host:port", hostport)
		}
		host, portText = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), strconv.Itoa(int(defaultPort))
	}
	n, err := strconv.Atoi(portText)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", hostport)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", 0, fmt.Errorf("%q: empty host", hostport)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().WithZone("").String()
	}
	return host, uint16(n), nil
}

// allowedAddrs checks host and port against the policy and returns the
// addresses the request may be dialled to: host's addresses, without those
// in loopback, private, link-local and other non-public ranges, which only
// an allow entry naming that very address permits. The error is a
// *refusal when the policy refuses.
func (p *Proxy) allowedAddrs(ctx context.Context, host string, port uint16) ([]netip.Addr, error) {
	target := net.JoinHostPort(host, strconv.Itoa(int(port)))
	if !p.policy.Permits(host, port) {
		return nil, &refusal{target: target, reason: "not on the allow list"}
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		found, err := p.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		addrs = found
	}
	var ok []netip.Addr
	var inner []string
	for _, a := range addrs {
		a = a.Unmap()
		if IsPublic(a) || p.listsAddr(a, port) {
			ok = append(ok, a)
		} else {
			inner = append(inner, a.String())
		}
	}
	if len(ok) == 0 {
		return nil, &refusal{target: target, reason: fmt.Sprintf(
			"it resolves to %s, a loopback, private or otherwise non-public address, which only an allow entry naming that address and port permits",
			strings.Join(inner, ", "))}
	}
	return ok, nil
}

// listsAddr reports whether an allow entry names address a (as an IP
// literal) with port.
func (p *Proxy) listsAddr(a netip.Addr, port uint16) bool {
	for _, h := range p.policy.Allow {
		if ip, ok := h.IP(); ok && ip.Unmap() == a && h.Matches(a.String(), port) {
			return true
		}
	}
	return false
}

// dialChecked dials addr (host:port) if the policy allows it: to one of the
// addresses allowedAddrs checked, never to the name, and the socket is
// checked again before it connects.
func (p *Proxy) dialChecked(ctx context.Context, addr string) (net.Conn, error) {
	host, port, err := splitTarget(addr, 0)
	if err != nil {
		return nil, err
	}
	addrs, err := p.allowedAddrs(ctx, host, port)
	if err != nil {
		return nil, err
	}
	allowed := map[netip.Addr]bool{}
	for _, a := range addrs {
		allowed[a] = true
	}
	d := net.Dialer{
		Timeout: p.dialTimeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !allowed[ap.Addr().Unmap()] || ap.Port() != port {
				return &refusal{target: net.JoinHostPort(host, strconv.Itoa(int(port))), reason: "dialled address " + address + " was not checked"}
			}
			return nil
		},
	}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// nonPublic are the ranges IsPublic refuses, named one by one; some are
// also caught by netip's own tests, and are listed so the list is whole.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: may embed any IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2002::/16"),       // 6to4: embeds an IPv4 address
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2001::/32"),       // Teredo: embeds an IPv4 address
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local (also netip's test)
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
	netip.MustParsePrefix("::ffff:0:0/96"),   // IPv4-mapped, when not unmapped
	netip.MustParsePrefix("::/128"),          // unspecified
	netip.MustParsePrefix("::1/128"),         // loopback
	netip.MustParsePrefix("fc00::/7"),        // unique local
	netip.MustParsePrefix("fe80::/10"),       // link-local
	netip.MustParsePrefix("10.0.0.0/8"),      // private
	netip.MustParsePrefix("172.16.0.0/12"),   // private
	netip.MustParsePrefix("192.168.0.0/16"),  // private
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
}

// IsPublic reports whether a is a global unicast address outside every
// loopback, private, link-local, shared, reserved and translation range: an
// address a name on an allow list may resolve to.
func IsPublic(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// Package envdclient is the Go client for envd, the daemon inside a sandbox:
// sandbox-mcp's own (`sandbox-mcp envd`, which the local provider starts in
// each sandbox) and any daemon speaking E2B's envd protocol, which ours
// implements (WithSandboxRouting, WithEnvdVersion and WithJSON exist for
// E2B's). The Manager and every tool reach a sandbox through it.
//
// It speaks the Connect protocol with the binary codec to the Process and
// Filesystem services, and plain HTTP to /files and /health. Errors are
// *connect.Error values with connect's closed set of codes; IsPossibleLoss
// says whether one could mean the sandbox is gone, IsNotSent whether the
// failed request certainly never reached the daemon.
//
// Transport rules, enforced by New and on every request:
//   - remote endpoints only over HTTPS; plain HTTP only to a loopback address
//     or a unix socket;
//   - no request, and no redirect, leaves the configured origin;
//   - the access token is sent only to that origin and never logged.
package envdclient

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem/filesystemconnect"
	"github.com/sandbox-mcp/sandbox-mcp/proto/process/processconnect"
)

// Defaults used when an option is not given.
const (
	// DefaultKeepalive is the Keepalive-Ping-Interval asked of envd on
	// streams, the value E2B's SDKs send.
	DefaultKeepalive = 50 * time.Second
	// DefaultKillTimeout bounds the kill sent when a call is abandoned.
	DefaultKillTimeout = time.Second
	// DefaultCaptureLimit is the per-stream capture of Run when the caller
	// sets none.
	DefaultCaptureLimit = 1 << 20
)

// Client talks to one envd. It is safe for concurrent use; create it with New
// and release idle connections with Close.
type Client struct {
	base      *url.URL // scheme://host of every request
	transport *http.Transport
	http      *http.Client
	procs     processconnect.ProcessClient
	files     filesystemconnect.FilesystemClient
	walkFiles filesystemconnect.FilesystemClient // files with a bounded response size, for WalkDir
	opts      options

	versionMu    sync.Mutex
	version      string // learned from /health ("" when the daemon does not say)
	versionKnown bool
}

type options struct {
	accessToken string
	user        string
	sandboxID   string
	sandboxPort int
	headers     http.Header
	envdVersion string
	keepalive   time.Duration
	killTimeout time.Duration
	tlsConfig   *tls.Config
	json        bool
	// unixSocketCheck runs before each unix socket dial (socketcheck.go).
	unixSocketCheck func(path string) error
}

// Option configures a Client.
type Option func(*options)

// WithAccessToken sends token in X-Access-Token on every request (E2B's
// secure sandboxes and sandbox-mcp's envd --access-token).
func WithAccessToken(token string) Option { return func(o *options) { o.accessToken = token } }

// WithUser runs processes and file operations as user (Basic auth for RPCs,
// the username query parameter for /files). Empty means envd's default user.
func WithUser(user string) Option { return func(o *options) { o.user = user } }

// WithSandboxRouting sends E2b-Sandbox-Id and E2b-Sandbox-Port, which E2B's
// shared sandbox host routes on. port 0 means 49983.
func WithSandboxRouting(sandboxID string, port int) Option {
	return func(o *options) {
		if port == 0 {
			port = 49983
		}
		o.sandboxID, o.sandboxPort = sandboxID, port
	}
}

// WithHeader adds a header to every request.
func WithHeader(key, value string) Option {
	return func(o *options) { o.headers.Add(key, value) }
}

// WithEnvdVersion tells the client the daemon's version (E2B's management API
// reports it), which gates features such as closing stdin (≥ 0.5.2). Without
// it the client asks GET /health for X-Envd-Version, and assumes a current
// daemon when the header is absent.
func WithEnvdVersion(v string) Option { return func(o *options) { o.envdVersion = v } }

// WithKeepalive sets the Keepalive-Ping-Interval asked of envd on streams.
// Default DefaultKeepalive; envd's resolution is one second.
func WithKeepalive(d time.Duration) Option { return func(o *options) { o.keepalive = d } }

// WithKillTimeout bounds the kill sent when a Run is abandoned (its context
// ended, or its stdin or stream failed). Default DefaultKillTimeout.
func WithKillTimeout(d time.Duration) Option { return func(o *options) { o.killTimeout = d } }

// WithTLSConfig sets the TLS configuration for https endpoints (for example
// extra root CAs). The client still negotiates HTTP/2 through ALPN.
func WithTLSConfig(cfg *tls.Config) Option { return func(o *options) { o.tlsConfig = cfg } }

// WithJSON makes RPCs use the JSON codec, as E2B's SDKs do, instead of the
// default binary codec. Useful for tests of interoperability.
func WithJSON() Option { return func(o *options) { o.json = true } }

// New returns a client for the envd at endpoint: "unix:/path/to/socket",
// "http://127.0.0.1:49983" (loopback only), or "https://host[:port]".
func New(endpoint string, opts ...Option) (*Client, error) {
	o := options{headers: http.Header{}, keepalive: DefaultKeepalive, killTimeout: DefaultKillTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	tr := &http.Transport{
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
		HTTP2: &http.HTTP2Config{
			// Windows of many output messages: the client grants more
			// window (a WINDOW_UPDATE) about once per message it reads, so
			// the daemon seldom waits for one under bulk output.
			MaxReceiveBufferPerConnection: 16 << 20,
			MaxReceiveBufferPerStream:     8 << 20,
			// Let the daemon send whole output chunks (messages of up to
			// 256 KiB from sandbox-mcp's envd, 32 KiB from E2B's) in one
			// frame instead of many 16 KiB ones.
			MaxReadFrameSize: 1 << 20,
		},
		Protocols: new(http.Protocols),
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	var base *url.URL
	switch {
	case strings.HasPrefix(endpoint, "unix:"):
		sock := strings.TrimPrefix(endpoint, "unix:")
		if sock == "" {
			return nil, fmt.Errorf("envd endpoint %q: empty socket path", endpoint)
		}
		base = &url.URL{Scheme: "http", Host: "envd"}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			if o.unixSocketCheck != nil {
				if err := o.unixSocketCheck(sock); err != nil {
					return nil, &DialError{Addr: endpoint, Err: err}
				}
			}
			c, err := dialer.DialContext(ctx, "unix", sock)
			if err != nil {
				return nil, &DialError{Addr: endpoint, Err: err}
			}
			return c, nil
		}
		// A socket is private to this machine: HTTP/2 without TLS, by prior
		// knowledge, multiplexes every call over one connection.
		tr.Protocols.SetUnencryptedHTTP2(true)
	default:
		u, err := url.Parse(endpoint)
		if err != nil {
			return nil, fmt.Errorf("envd endpoint %q: %w", endpoint, err)
		}
		if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("envd endpoint %q: want scheme://host[:port] with no path, query or credentials", endpoint)
		}
		switch u.Scheme {
		case "https":
			tr.TLSClientConfig = o.tlsConfig
			tr.Protocols.SetHTTP1(true)
			tr.Protocols.SetHTTP2(true)
		case "http":
			if !isLoopback(u.Hostname()) {
				return nil, fmt.Errorf("envd endpoint %q: plain http is allowed only to a loopback address or a unix socket; use https", endpoint)
			}
			tr.Protocols.SetHTTP1(true)
		default:
			return nil, fmt.Errorf("envd endpoint %q: scheme %q is not unix, http or https", endpoint, u.Scheme)
		}
		base = &url.URL{Scheme: u.Scheme, Host: u.Host}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &DialError{Addr: addr, Err: err}
			}
			return c, nil
		}
	}
	c := &Client{base: base, transport: tr, opts: o}
	c.http = &http.Client{
		Transport:     &stampTransport{next: tr, origin: base, opts: &c.opts},
		CheckRedirect: c.checkRedirect,
	}
	clientOpts := []connect.ClientOption{}
	procOpts := []connect.ClientOption{connect.WithCodec(processCodec{})}
	if o.json {
		clientOpts = append(clientOpts, connect.WithProtoJSON())
		procOpts = clientOpts
	}
	c.procs = processconnect.NewProcessClient(c.http, base.String(), procOpts...)
	c.files = filesystemconnect.NewFilesystemClient(c.http, base.String(), clientOpts...)
	c.walkFiles = filesystemconnect.NewFilesystemClient(c.http, base.String(),
		append(slices.Clone(clientOpts), connect.WithReadMaxBytes(maxUnpagedListBytes))...)
	return c, nil
}

// Close releases idle connections. Calls in flight are not interrupted.
func (c *Client) Close() { c.transport.CloseIdleConnections() }

// Endpoint returns the origin requests go to ("http://envd" for a socket).
func (c *Client) Endpoint() string { return c.base.String() }

// HTTPClient returns the client's HTTP client, for a caller that forwards
// requests of its own to the daemon (the management server's envd proxy):
// requests to Endpoint() get the credentials and routing headers and go
// through the unix socket check; requests anywhere else are refused.
func (c *Client) HTTPClient() *http.Client { return c.http }

// isLoopback reports whether host is localhost or a loopback IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}

// checkRedirect refuses any redirect that leaves the configured origin, so
// the access token and the sandbox's data never go anywhere else.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if !sameOrigin(req.URL, c.base) {
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("envd redirected to %s://%s, which leaves the configured origin %s; refused", req.URL.Scheme, req.URL.Host, c.base))
	}
	if len(via) >= 5 {
		return connect.NewError(connect.CodeUnavailable, errors.New("envd redirected more than 5 times"))
	}
	return nil
}

// stampTransport adds credentials and routing headers to requests for the
// configured origin, and refuses any other. With sandbox routing, E2B's
// proxy answering that it has no such sandbox becomes a
// *SandboxNotFoundError (the request reached no envd).
type stampTransport struct {
	next   http.RoundTripper
	origin *url.URL
	opts   *options
}

func (t *stampTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !sameOrigin(req.URL, t.origin) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("request to %s://%s refused: it leaves the configured envd origin %s", req.URL.Scheme, req.URL.Host, t.origin)
	}
	req = req.Clone(req.Context())
	h := req.Header
	for k, vs := range t.opts.headers {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	if t.opts.accessToken != "" {
		h.Set("X-Access-Token", t.opts.accessToken)
	}
	if t.opts.sandboxID != "" {
		h.Set("E2b-Sandbox-Id", t.opts.sandboxID)
		h.Set("E2b-Sandbox-Port", strconv.Itoa(t.opts.sandboxPort))
	}
	if t.opts.user != "" && h.Get("Authorization") == "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(t.opts.user+":")))
	}
	resp, err := t.next.RoundTrip(req)
	if err == nil && t.opts.sandboxID != "" && sandboxNotFound(resp, t.opts.sandboxID) {
		resp.Body.Close()
		return nil, &SandboxNotFoundError{SandboxID: t.opts.sandboxID}
	}
	return resp, err
}

// Health checks GET /health (204 when the daemon is up).
func (c *Client) Health(ctx context.Context) error {
	_, err := c.health(ctx)
	return err
}

func (c *Client) health(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.String()+"/health", nil)
	if err != nil {
		return "", connect.NewError(connect.CodeInternal, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", transportError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return "", responseError(resp)
	}
	return resp.Header.Get("X-Envd-Version"), nil
}

// Version returns the daemon's envd version: the one given with
// WithEnvdVersion, else the X-Envd-Version header of GET /health, else ""
// (unknown). A successful answer is cached.
func (c *Client) Version(ctx context.Context) (string, error) {
	if c.opts.envdVersion != "" {
		return c.opts.envdVersion, nil
	}
	c.versionMu.Lock()
	defer c.versionMu.Unlock()
	if c.versionKnown {
		return c.version, nil
	}
	v, err := c.health(ctx)
	if err != nil {
		return "", err
	}
	c.version, c.versionKnown = v, true
	return v, nil
}

// atLeast reports whether version v (like "0.5.2" or "v0.5.2") is at least
// want. An empty or unparsable v counts as current.
func atLeast(v, want string) bool {
	if v == "" {
		return true
	}
	pa, ok1 := parseVersion(v)
	pb, ok2 := parseVersion(want)
	if !ok1 || !ok2 {
		return true
	}
	for i := range pa {
		if pa[i] != pb[i] {
			return pa[i] > pb[i]
		}
	}
	return true
}

func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) == 0 || len(parts) > 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// streamHeaders sets the headers every streaming call carries.
func (c *Client) streamHeaders(h http.Header) {
	secs := int(c.opts.keepalive / time.Second)
	if secs < 1 {
		secs = 1
	}
	h.Set("Keepalive-Ping-Interval", strconv.Itoa(secs))
}

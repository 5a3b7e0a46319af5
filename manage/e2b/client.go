// Package e2b is the E2B sandbox provider: sandboxes are E2B's Firecracker
// microVMs (E2B's cloud, a self-hosted E2B, or `sandbox-mcp manage serve`),
// made and controlled through E2B's management REST API (Client) and reached
// through E2B's envd exactly as E2B's official SDKs reach it.
//
// It has no platform-specific code: a server on macOS or Windows runs it.
//
// # Lifecycle
//
// Every sandbox is created with autoPause, so when its time to live runs out
// E2B pauses it rather than killing it; the next call resumes it through
// POST /sandboxes/{id}/connect. While an operation holds a sandbox the
// Manager calls KeepAlive, which refreshes its time to live, so a long
// command is not cut off by E2B's timeout. Info is GET /sandboxes/{id}: a
// 404 means the sandbox is gone (killed, deleted, or expired without a
// snapshot), which is what authorises the Manager to replace it.
//
// Every sandbox carries metadata labels (MetaOwner, MetaKey, ...), and List
// returns only the sandboxes whose owner label is this provider's, so a
// server that restarts finds its own.
package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// Defaults of the Client's options.
const (
	// DefaultTimeout bounds one API call, its retries and their waits
	// included.
	DefaultTimeout = 60 * time.Second
	// DefaultRetries is how many times an idempotent call is retried after
	// a transient failure.
	DefaultRetries = 4
	// DefaultBackoff is the first wait before a retry; it doubles on each
	// retry, with jitter, up to MaxBackoff.
	DefaultBackoff = 250 * time.Millisecond
	// MaxBackoff caps a retry's wait that no Retry-After header asked for.
	MaxBackoff = 5 * time.Second
)

// Client calls E2B's management API with an API key. It is safe for
// concurrent use.
type Client struct {
	base    *url.URL
	apiKey  string
	http    *http.Client
	timeout time.Duration
	retries int
	backoff time.Duration
	agent   string
	// sleep waits d before a retry, or returns ctx's error first (a test
	// replaces it to see the waits).
	sleep func(ctx context.Context, d time.Duration) error
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests through hc (default: a
// client of its own with no overall timeout; WithTimeout bounds calls).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithTimeout bounds each call, retries and their waits included. Default
// DefaultTimeout; a call's context may end it sooner.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithRetries sets how many times an idempotent call is retried after a
// transient failure (0: never). Default DefaultRetries.
func WithRetries(n int) Option {
	return func(c *Client) {
		if n >= 0 {
			c.retries = n
		}
	}
}

// WithBackoff sets the first retry's wait, which doubles (with jitter) on
// each further retry, up to MaxBackoff. Default DefaultBackoff.
func WithBackoff(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.backoff = d
		}
	}
}

// WithUserAgent sets the User-Agent header (default "sandbox-mcp").
func WithUserAgent(ua string) Option { return func(c *Client) { c.agent = ua } }

// NewClient returns a client of the management API at baseURL
// ("https://api.e2b.app"), authenticating with apiKey (sent in X-API-Key,
// never logged). Plain http is allowed only to a loopback address.
func NewClient(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("e2b api url %q: %w", baseURL, err)
	}
	if u.Host == "" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("e2b api url %q: want https://host[:port][/path]", baseURL)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopback(u.Hostname()) {
			return nil, fmt.Errorf("e2b api url %q: plain http is allowed only to a loopback address; use https (the API key travels with every request)", baseURL)
		}
	default:
		return nil, fmt.Errorf("e2b api url %q: scheme %q is not https", baseURL, u.Scheme)
	}
	if apiKey == "" {
		return nil, errors.New("e2b api: an API key is required (--e2b-api-key or E2B_API_KEY)")
	}
	c := &Client{base: u, apiKey: apiKey, timeout: DefaultTimeout, retries: DefaultRetries, backoff: DefaultBackoff, agent: "sandbox-mcp", sleep: sleepCtx}
	for _, opt := range opts {
		opt(c)
	}
	if c.http == nil {
		c.http = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
		}}
	}
	return c, nil
}

// BaseURL returns the API's base URL.
func (c *Client) BaseURL() string { return c.base.String() }

// isLoopback reports whether host is localhost or a loopback IP.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// idempotency says whether a call may be sent again.
type idempotency bool

const (
	idempotent    idempotency = true
	notIdempotent idempotency = false
)

// call is one API request.
type call struct {
	op     string // for errors: "create sandbox", "pause sandbox ID"
	method string
	path   string
	query  url.Values
	body   any
	retry  idempotency
}

// response is a successful answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends cl, retrying it on transient failures when it is idempotent,
// all within the Client's timeout. A non-2xx answer is an *APIError.
func (c *Client) do(ctx context.Context, cl call) (response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var payload []byte
	if cl.body != nil {
		var err error
		if payload, err = json.Marshal(cl.body); err != nil {
			return response{}, fmt.Errorf("e2b api: %s: %w", cl.op, err)
		}
	}
	for attempt := 1; ; attempt++ {
		resp, err := c.once(ctx, cl, payload)
		if err == nil {
			return resp, nil
		}
		wait, again := c.retryable(cl, err, attempt)
		if !again {
			return response{}, c.final(ctx, cl, err, attempt)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			// The wait would outlast the call's budget: fail now.
			return response{}, c.final(ctx, cl, err, attempt)
		}
		if c.sleep(ctx, wait) != nil {
			return response{}, c.final(ctx, cl, err, attempt)
		}
	}
}

// sleepCtx waits d, or returns ctx's error when it ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// once sends one attempt of cl.
func (c *Client) once(ctx context.Context, cl call, payload []byte) (response, error) {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + cl.path
	if len(cl.query) > 0 {
		u.RawQuery = cl.query.Encode()
	}
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u.String(), body)
	if err != nil {
		return response{}, err
	}
	req.Header.Set(e2bapi.HeaderAPIKey, c.apiKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.agent)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return response{}, &transportError{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return response{}, &transportError{err: err, sent: true}
	}
	if resp.StatusCode/100 != 2 {
		return response{}, newAPIError(cl.op, resp, data)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// transportError is an attempt that got no HTTP answer.
type transportError struct {
	err  error
	sent bool // the request was certainly sent (the answer broke off)
}

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// notSent reports whether the request certainly never reached the server:
// the connection could not be opened.
func (e *transportError) notSent() bool {
	if e.sent {
		return false
	}
	var op *net.OpError
	return errors.As(e.err, &op) && op.Op == "dial"
}

// retryable says whether to send cl again after err, its attempt-th
// failure, and after how long.
func (c *Client) retryable(cl call, err error, attempt int) (time.Duration, bool) {
	if attempt > c.retries {
		return 0, false
	}
	var te *transportError
	var ae *APIError
	switch {
	case errors.As(err, &te):
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return 0, false
		}
		// A request that may have reached the server is sent again only
		// when sending it twice does no harm.
		if cl.retry != idempotent && !te.notSent() {
			return 0, false
		}
		return c.backoffFor(attempt), true
	case errors.As(err, &ae):
		if cl.retry != idempotent || !transientStatus(ae.Status) {
			return 0, false
		}
		wait := c.backoffFor(attempt)
		if ae.RetryAfter > wait {
			wait = ae.RetryAfter
		}
		return wait, true
	}
	return 0, false
}

// transientStatus reports whether an HTTP status may go away on its own:
// 429 (rate limited) and a proxy's 502, 503, 504.
func transientStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// backoffFor is the wait before retry number attempt: DefaultBackoff
// doubled attempt-1 times, capped at MaxBackoff, with jitter (between half
// and all of it).
func (c *Client) backoffFor(attempt int) time.Duration {
	d := c.backoff
	for i := 1; i < attempt && d < MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// final is the error a call returns after its last attempt failed with err.
func (c *Client) final(ctx context.Context, cl call, err error, attempts int) error {
	var ae *APIError
	if errors.As(err, &ae) {
		ae.Attempts = attempts
		return ae
	}
	if ctx.Err() != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	what := fmt.Sprintf("after %d attempts", attempts)
	if attempts == 1 {
		what = "no retry"
		if cl.retry != idempotent {
			what = "not retried: the request may have reached the server"
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("e2b api %s: %s: no answer within %s (%s): %w", c.base.Host, cl.op, c.timeout, what, err)
	}
	return fmt.Errorf("e2b api %s: %s: cannot reach the API (%s): %w", c.base.Host, cl.op, what, err)
}

// decode parses a successful answer's JSON body into v.
func decode[T any](cl call, resp response) (T, error) {
	var v T
	if err := json.Unmarshal(resp.body, &v); err != nil {
		return v, fmt.Errorf("e2b api: %s: answer %d is not the expected JSON: %w", cl.op, resp.status, err)
	}
	return v, nil
}

//go:build linux

package e2bserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

// Keys of the tests' two tenants.
const (
	keyA = "e2b_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	keyB = "e2b_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// countingProvider counts the provider calls that reach the provider.
type countingProvider struct {
	manage.Provider
	calls atomic.Int64
}

func (p *countingProvider) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
	p.calls.Add(1)
	return p.Provider.Create(ctx, cfg)
}

func (p *countingProvider) Info(ctx context.Context, id string) (manage.Sandbox, error) {
	p.calls.Add(1)
	return p.Provider.Info(ctx, id)
}

func (p *countingProvider) Endpoint(ctx context.Context, id string) (manage.Endpoint, error) {
	p.calls.Add(1)
	return p.Provider.Endpoint(ctx, id)
}

func (p *countingProvider) Pause(ctx context.Context, id string) error {
	p.calls.Add(1)
	return p.Provider.Pause(ctx, id)
}

func (p *countingProvider) Resume(ctx context.Context, id string) error {
	p.calls.Add(1)
	return p.Provider.Resume(ctx, id)
}

func (p *countingProvider) Kill(ctx context.Context, id string) error {
	p.calls.Add(1)
	return p.Provider.Kill(ctx, id)
}

// newLocalProvider starts a local provider on a fresh state directory
// (searchable by everyone, as bwrap's unprivileged user needs).
func newLocalProvider(t testing.TB) *local.Provider {
	t.Helper()
	testenv.RequireRoot(t)
	dir, err := os.MkdirTemp("", "e2bserver-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	p, err := local.New(context.Background(), local.Config{StateDir: filepath.Join(dir, "state"), Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Close(context.Background())
		_ = os.RemoveAll(dir)
	})
	return p
}

// quietLog drops logs below warnings.
func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// harness is a Server on a real loopback listener.
type harness struct {
	t        testing.TB
	srv      *Server
	url      string
	provider *countingProvider
	expired  chan string
}

// start serves a Server over p with keys A and B; stateDir "" keeps the
// records in memory.
func start(t testing.TB, p manage.Provider, stateDir string) *harness {
	t.Helper()
	cp := &countingProvider{Provider: p}
	expired := make(chan string, 16)
	srv, err := New(context.Background(), Config{Provider: cp, APIKeys: []string{keyA, keyB}, StateDir: stateDir, Logger: quietLog(), expired: expired})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		if err := srv.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &harness{t: t, srv: srv, url: hs.URL, provider: cp, expired: expired}
}

// do sends an API request with key and decodes a JSON answer into out
// (when not nil); it returns the response (body consumed).
func (h *harness) do(key, method, path string, body, out any) *http.Response {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(e2bapi.HeaderAPIKey, key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s %s: %d %q: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp
}

// status sends a request and checks its status.
func (h *harness) status(want int, key, method, path string, body, out any) {
	h.t.Helper()
	if got := h.do(key, method, path, body, out).StatusCode; got != want {
		h.t.Fatalf("%s %s: status %d, want %d", method, path, got, want)
	}
}

// create makes a sandbox for key.
func (h *harness) create(key string, body e2bapi.NewSandbox) e2bapi.Sandbox {
	h.t.Helper()
	if body.TemplateID == "" {
		body.TemplateID = "base"
	}
	var sb e2bapi.Sandbox
	h.status(http.StatusCreated, key, http.MethodPost, "/sandboxes", body, &sb)
	if !validID(sb.SandboxID) {
		h.t.Fatalf("sandbox id %q is not lowercase alphanumeric", sb.SandboxID)
	}
	return sb
}

// envd is an envd client that reaches sb through the server's proxy, as
// E2B's SDKs do (shared host with routing headers).
func (h *harness) envd(sb e2bapi.Sandbox) *envdclient.Client {
	h.t.Helper()
	opts := []envdclient.Option{envdclient.WithSandboxRouting(sb.SandboxID, e2bapi.EnvdPort), envdclient.WithJSON()}
	if sb.EnvdAccessToken != "" {
		opts = append(opts, envdclient.WithAccessToken(sb.EnvdAccessToken))
	}
	c, err := envdclient.New(h.url, opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(c.Close)
	return c
}

// waitExpired waits for the reaper to act on id.
func (h *harness) waitExpired(id string) {
	h.t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case got := <-h.expired:
			if got == id {
				return
			}
		case <-timeout:
			h.t.Fatalf("sandbox %s did not expire", id)
		}
	}
}

// detail is GET /sandboxes/{id}.
func (h *harness) detail(key, id string) (e2bapi.SandboxDetail, int) {
	h.t.Helper()
	var d e2bapi.SandboxDetail
	resp := h.do(key, http.MethodGet, "/sandboxes/"+id, nil, &d)
	return d, resp.StatusCode
}

// proxyGet sends GET path to the proxy with the given Host and headers and
// returns the status and body.
func (h *harness) proxyGet(host string, headers map[string]string, path string) (int, string) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodGet, h.url+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// runTrue runs `true` through c and fails the test unless it exits 0.
func runTrue(t testing.TB, c *envdclient.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Run(ctx, envdclient.Command{Cmd: "true"}, envdclient.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("true: exit %d", res.ExitCode)
	}
}

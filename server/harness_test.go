//go:build linux

package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// failTimeout bounds every wait in these tests; it only fires on failure.
const failTimeout = 30 * time.Second

// testEnv is a real Server over a Manager of managetest sandboxes (real envd
// daemons in-process), served by ServeHTTP on a loopback listener.
type testEnv struct {
	t        testing.TB
	provider *managetest.Provider
	manager  *manage.Manager
	srv      *Server
	base     string // scheme://127.0.0.1:port
	rt       http.RoundTripper
	blocks   *blockTool

	stopOnce sync.Once
	cancel   context.CancelFunc
	served   chan error
	stopErr  error
}

type envOptions struct {
	tokens          map[string]string
	origins         []string
	maxBody         int64
	idleTTL         time.Duration
	tls             bool
	shutdownTimeout time.Duration
	workspace       tools.Workspace
	toolsConfig     tools.Config
	noHTTP          bool
	maxStdioMessage int64
	maxCalls        int
	// maxRequestMemory is Config.MaxRequestMemory.
	maxRequestMemory int64
}

func testLogger() *slog.Logger {
	if os.Getenv("SERVER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newEnv(t testing.TB, opts envOptions) *testEnv {
	t.Helper()
	log := testLogger()
	p := managetest.New(t)
	m, err := manage.New(manage.Options{Provider: p, AutoRecreate: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	deps := tools.NewDeps(m, opts.toolsConfig, log)
	ts, err := tools.Selected(deps)
	if err != nil {
		t.Fatal(err)
	}
	blocks := newBlockTool()
	ts = append(ts, whoamiTool(m), progressTool(), panicTool(), blocks.tool(), splitProbeTool(), bigTextTool())
	cfg := Config{
		Name: "sandbox-mcp-test", Version: "0",
		Deps: deps, Tools: ts, Logger: log,
		Workspace:          opts.workspace,
		AuthTokens:         opts.tokens,
		AllowedOrigins:     opts.origins,
		MaxBodyBytes:       opts.maxBody,
		SessionIdleTTL:     opts.idleTTL,
		ShutdownTimeout:    opts.shutdownTimeout,
		MaxConcurrentCalls: opts.maxCalls,
		MaxRequestMemory:   opts.maxRequestMemory,

		MaxStdioMessageBytes: opts.maxStdioMessage,
	}
	rt := http.DefaultTransport.(*http.Transport).Clone()
	scheme := "http"
	if opts.tls {
		cfg.TLSCert, cfg.TLSKey, rt.TLSClientConfig = selfSignedCert(t)
		scheme = "https"
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, provider: p, manager: m, srv: srv, rt: rt, blocks: blocks}
	t.Cleanup(rt.CloseIdleConnections)
	if opts.noHTTP {
		return e
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.base = scheme + "://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.served = cancel, make(chan error, 1)
	go func() { e.served <- srv.ServeHTTP(ctx, ln) }()
	t.Cleanup(func() {
		if err := e.stop(); err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	})
	return e
}

// stop ends ServeHTTP (graceful shutdown) and returns its error.
func (e *testEnv) stop() error {
	e.stopOnce.Do(func() {
		e.cancel()
		select {
		case e.stopErr = <-e.served:
		case <-time.After(2 * failTimeout):
			e.stopErr = errors.New("ServeHTTP did not return after its context ended")
		}
	})
	return e.stopErr
}

// selfSignedCert writes a self-signed certificate for 127.0.0.1 and returns
// its files and a client config that trusts it.
func selfSignedCert(t testing.TB) (certFile, keyFile string, cfg *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sandbox-mcp test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// headerTransport adds headers to every request, the DELETE that mcp-go's
// client sends on Close included (transport.WithHTTPHeaders misses that one).
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// clientOptions pick the client's revision and headers.
type clientOptions struct {
	legacy    bool   // pin 2025-11-25 (sessions); default 2026-07-28 (stateless)
	token     string // bearer token, if any
	workspace string // Sandbox-Workspace, if any
	headers   map[string]string
}

// mcpClient is an mcp-go streamable-HTTP client that records notifications.
type mcpClient struct {
	*client.Client
	mu            sync.Mutex
	notifications []mcp.JSONRPCNotification
	notified      chan struct{} // receives (non-blocking) on each notification
}

func (e *testEnv) httpHeaders(o clientOptions) map[string]string {
	h := map[string]string{}
	for k, v := range o.headers {
		h[k] = v
	}
	if o.token != "" {
		h["Authorization"] = "Bearer " + o.token
	}
	if o.workspace != "" {
		h[WorkspaceHeader] = o.workspace
	}
	return h
}

// client returns an initialised client; it is closed when the test ends.
func (e *testEnv) client(t testing.TB, o clientOptions) *mcpClient {
	t.Helper()
	c, err := e.newClient(o)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *testEnv) newClient(o clientOptions) (*mcpClient, error) {
	hc := &http.Client{Transport: headerTransport{base: e.rt, headers: e.httpHeaders(o)}}
	tr, err := transport.NewStreamableHTTP(e.base+"/mcp", transport.WithHTTPBasicClient(hc))
	if err != nil {
		return nil, err
	}
	return newMCPClient(tr, o.legacy)
}

// newMCPClient starts and initialises a client over tr.
func newMCPClient(tr transport.Interface, legacy bool) (*mcpClient, error) {
	mc := &mcpClient{Client: client.NewClient(tr), notified: make(chan struct{}, 1)}
	mc.OnNotification(func(n mcp.JSONRPCNotification) {
		mc.mu.Lock()
		mc.notifications = append(mc.notifications, n)
		mc.mu.Unlock()
		select {
		case mc.notified <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), failTimeout)
	defer cancel()
	if err := mc.Start(ctx); err != nil {
		return nil, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "server-test", Version: "0"}
	if legacy {
		init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	}
	if _, err := mc.Initialize(ctx, init); err != nil {
		mc.Close()
		return nil, err
	}
	return mc, nil
}

// progress returns the progress notifications received so far.
func (c *mcpClient) progress() []mcp.JSONRPCNotification {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []mcp.JSONRPCNotification
	for _, n := range c.notifications {
		if n.Method == string(mcp.MethodNotificationProgress) {
			out = append(out, n)
		}
	}
	return out
}

// call invokes a tool; a JSON-RPC error fails the test.
func (c *mcpClient) call(t testing.TB, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := c.callErr(context.Background(), name, args, nil)
	if err != nil {
		t.Fatalf("%s: JSON-RPC error: %v", name, err)
	}
	return res
}

func (c *mcpClient) callErr(ctx context.Context, name string, args any, progressToken any) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, failTimeout)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	if progressToken != nil {
		req.Params.Meta = &mcp.Meta{ProgressToken: progressToken}
	}
	return c.CallTool(ctx, req)
}

// ok calls a tool that must succeed and decodes its structured content.
func (c *mcpClient) ok(t testing.TB, name string, args any, out any) *mcp.CallToolResult {
	t.Helper()
	res := c.call(t, name, args)
	if res.IsError {
		t.Fatalf("%s(%v) failed: %s", name, args, resultText(res))
	}
	decodeStructured(t, res, out)
	return res
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := mcp.AsTextContent(c); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func decodeStructured(t testing.TB, res *mcp.CallToolResult, out any) {
	t.Helper()
	if out == nil {
		return
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
}

// rawRequest sends one HTTP request to the server and returns the response
// with its body read.
func (e *testEnv) rawRequest(t testing.TB, method, path, body string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		if k == "Host" {
			req.Host = v // net/http takes Host from here, not from Header
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: e.rt}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp, string(b)
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// rawSession initialises a session with raw HTTP and returns its id.
func (e *testEnv) rawSession(t testing.TB, headers map[string]string) string {
	t.Helper()
	resp, body := e.rawRequest(t, http.MethodPost, "/mcp", initializeBody, headers)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	sid := resp.Header.Get(mcpserver.HeaderKeySessionID)
	if sid == "" {
		t.Fatal("initialize returned no session id")
	}
	return sid
}

// openStream opens the listening GET stream of session sid and returns a
// channel closed when the server ends it.
func (e *testEnv) openStream(t testing.TB, sid string) <-chan struct{} {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.base+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(mcpserver.HeaderKeySessionID, sid)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20251125)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{Transport: e.rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET stream: %d", resp.StatusCode)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	return ended
}

// listen opens the listening GET stream of session sid and returns the data
// of each SSE event it carries, and a function that closes the stream.
func (e *testEnv) listen(t testing.TB, sid string) (<-chan string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/mcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(mcpserver.HeaderKeySessionID, sid)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20251125)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{Transport: e.rt}).Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		t.Fatalf("GET stream: %d", resp.StatusCode)
	}
	events := make(chan string, 64)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				select {
				case events <- data:
				default:
				}
			}
		}
	}()
	t.Cleanup(cancel)
	return events, cancel
}

// mcpKnows reports whether mcp-go still holds session sid (its transport
// state is released with its registration). The probe changes nothing.
func (e *testEnv) mcpKnows(sid string) bool {
	return !errors.Is(e.srv.MCP().DeleteSessionTools(sid), mcpserver.ErrSessionNotFound)
}

// initialized sends notifications/initialized in raw session sid.
func (e *testEnv) initialized(t testing.TB, sid string) {
	t.Helper()
	resp, body := e.rawRequest(t, http.MethodPost, "/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		map[string]string{mcpserver.HeaderKeySessionID: sid, mcp.HeaderProtocolVersion: mcp.ProtocolVersion20251125})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s", resp.StatusCode, body)
	}
}

// waitFor polls cond until it holds; it is for effects of other goroutines
// or processes that signal nothing (a sandbox disappearing, a process
// dying), never a substitute for a synchronisation the test controls.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stdioClient serves e.srv over in-process pipes with ServeStdio and returns
// an initialised client (2025-11-25 when legacy) and ServeStdio's result.
// Closing the client ends stdin (EOF).
func (e *testEnv) stdioClient(t testing.TB, ctx context.Context, legacy bool) (*mcpClient, <-chan error) {
	t.Helper()
	inR, inW := io.Pipe()   // client → server
	outR, outW := io.Pipe() // server → client
	done := make(chan error, 1)
	finished := make(chan struct{})
	out := &jsonLines{w: outW}
	t.Cleanup(func() {
		if bad := out.badLine(); bad != "" {
			t.Errorf("stdout carried a line that is not a JSON-RPC message: %q", bad)
		}
	})
	go func() {
		defer close(finished)
		err := e.srv.ServeStdio(ctx, inR, out)
		outW.Close()
		inR.Close()
		done <- err
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-finished:
		case <-time.After(failTimeout):
			t.Error("ServeStdio did not return after stdin ended")
		}
	})
	c, err := newMCPClient(transport.NewIO(outR, inW, nil), legacy)
	if err != nil {
		t.Fatalf("stdio client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, done
}

// jsonLines passes writes on and remembers the first complete line that is
// not a JSON-RPC message: stdout in stdio mode carries nothing else.
type jsonLines struct {
	w io.Writer

	mu      sync.Mutex
	partial []byte
	bad     string
}

func (j *jsonLines) Write(p []byte) (int, error) {
	j.mu.Lock()
	j.partial = append(j.partial, p...)
	for {
		i := bytes.IndexByte(j.partial, '\n')
		if i < 0 {
			break
		}
		line := j.partial[:i]
		var msg struct {
			JSONRPC string `json:"jsonrpc"`
		}
		if j.bad == "" && (json.Unmarshal(line, &msg) != nil || msg.JSONRPC != "2.0") {
			j.bad = string(line)
		}
		j.partial = j.partial[i+1:]
	}
	j.mu.Unlock()
	return j.w.Write(p)
}

func (j *jsonLines) badLine() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.bad
}

// --- test-only tools ---

type whoami struct {
	Key        string `json:"key"`
	Named      bool   `json:"named"`
	SandboxID  string `json:"sandbox_id"`
	Generation int64  `json:"generation"`
}

// whoamiTool reports the workspace a call is bound to and its sandbox
// (acquiring it, so the sandbox exists afterwards).
func whoamiTool(m *manage.Manager) tools.Tool {
	def := mcp.NewToolWithRawSchema("test_whoami", "report the call's workspace", json.RawMessage(`{"type":"object","additionalProperties":false}`))
	return tools.Tool{Toolset: tools.ToolsetAdmin, Def: def, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ws := tools.WorkspaceFrom(ctx)
		l, err := m.Acquire(ctx, ws.Key, ws.Named)
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		defer l.Release()
		out := whoami{Key: ws.Key, Named: ws.Named, SandboxID: l.Sandbox.ID, Generation: l.Generation}
		raw, _ := json.Marshal(out)
		return mcp.NewToolResultStructured(out, string(raw)), nil
	}}
}

// progressTool sends n progress notifications, the last one just before it
// returns (the case mcp-go can lose without an event store).
func progressTool() tools.Tool {
	def := mcp.NewToolWithRawSchema("test_progress", "send n progress notifications",
		json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":0}},"required":["n"],"additionalProperties":false}`))
	return tools.Tool{Toolset: tools.ToolsetAdmin, Def: def, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n, err := req.RequireInt("n")
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		var tok mcp.ProgressToken
		if req.Params.Meta != nil {
			tok = req.Params.Meta.ProgressToken
		}
		s := mcpserver.ServerFromContext(ctx)
		for i := 1; i <= n && tok != nil; i++ {
			if err := s.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress),
				map[string]any{"progressToken": tok, "progress": i, "total": n}); err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
		}
		return mcp.NewToolResultText("sent"), nil
	}}
}

func panicTool() tools.Tool {
	def := mcp.NewToolWithRawSchema("test_panic", "panic", json.RawMessage(`{"type":"object"}`))
	return tools.Tool{Toolset: tools.ToolsetAdmin, Def: def, Handler: func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		panic("boom")
	}}
}

// blockTool blocks until released or until its call's context ends, and
// reports both to the test. Given a progress token, it sends one progress
// notification before it blocks.
type blockTool struct {
	started   chan struct{}
	release   chan struct{}
	cancelled chan struct{}
}

func newBlockTool() *blockTool {
	return &blockTool{started: make(chan struct{}, 16), release: make(chan struct{}), cancelled: make(chan struct{}, 16)}
}

func (b *blockTool) tool() tools.Tool {
	def := mcp.NewToolWithRawSchema("test_block", "block until released or cancelled", json.RawMessage(`{"type":"object"}`))
	return tools.Tool{Toolset: tools.ToolsetAdmin, Def: def, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
			if err := mcpserver.ServerFromContext(ctx).SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress),
				map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": 1}); err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
		}
		b.started <- struct{}{}
		select {
		case <-b.release:
			return mcp.NewToolResultText("released"), nil
		case <-ctx.Done():
			b.cancelled <- struct{}{}
			return mcp.NewToolResultError("cancelled"), nil
		}
	}}
}

// recv waits for one value on ch.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failTimeout):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

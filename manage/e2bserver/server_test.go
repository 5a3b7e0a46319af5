//go:build linux

package e2bserver

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

func ptr[T any](v T) *T { return &v }

// TestLifecycle walks one sandbox through E2B's endpoints and checks every
// status code the SDKs and the e2b provider rely on.
func TestLifecycle(t *testing.T) {
	h := start(t, newLocalProvider(t), "")
	sb := h.create(keyA, e2bapi.NewSandbox{Timeout: 600, Metadata: map[string]string{"owner": "test", "n": "1"}})
	if sb.EnvdVersion == "" || sb.ClientID == "" || sb.TemplateID != "base" || sb.EnvdAccessToken != "" {
		t.Fatalf("create: %+v", sb)
	}
	d, code := h.detail(keyA, sb.SandboxID)
	if code != http.StatusOK || d.State != e2bapi.StateRunning || d.Lifecycle == nil || d.Lifecycle.OnTimeout != "kill" || d.Metadata["owner"] != "test" {
		t.Fatalf("get: %d %+v", code, d)
	}
	if ttl := time.Until(d.EndAt); ttl < 500*time.Second || ttl > 601*time.Second {
		t.Fatalf("endAt %v is not about 600 s ahead", d.EndAt)
	}
	runTrue(t, h.envd(sb))

	// Resume of a running sandbox is a conflict; connect extends only.
	h.status(http.StatusConflict, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/resume", map[string]int{"timeout": 60}, nil)
	h.status(http.StatusOK, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", e2bapi.ConnectSandbox{Timeout: 30}, nil)
	if d2, _ := h.detail(keyA, sb.SandboxID); !d2.EndAt.Equal(d.EndAt) {
		t.Fatalf("connect with a shorter timeout moved endAt %v to %v", d.EndAt, d2.EndAt)
	}
	// Refresh extends only; timeout may shorten.
	h.status(http.StatusNoContent, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/refreshes", e2bapi.Refresh{Duration: 20}, nil)
	if d2, _ := h.detail(keyA, sb.SandboxID); !d2.EndAt.Equal(d.EndAt) {
		t.Fatalf("a short refresh moved endAt %v to %v", d.EndAt, d2.EndAt)
	}
	h.status(http.StatusNoContent, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/timeout", e2bapi.SetTimeout{Timeout: 300}, nil)
	if d2, _ := h.detail(keyA, sb.SandboxID); !d2.EndAt.Before(d.EndAt) {
		t.Fatalf("timeout 300 did not shorten endAt %v (now %v)", d.EndAt, d2.EndAt)
	}
	h.status(http.StatusBadRequest, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/timeout", e2bapi.SetTimeout{Timeout: 25 * 3600}, nil)

	// Pause: 204, then 409; paused sandboxes are listed and readable.
	h.status(http.StatusNoContent, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", nil, nil)
	h.status(http.StatusConflict, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", nil, nil)
	h.status(http.StatusConflict, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/timeout", e2bapi.SetTimeout{Timeout: 60}, nil)
	if d2, _ := h.detail(keyA, sb.SandboxID); d2.State != e2bapi.StatePaused {
		t.Fatalf("after pause: state %q", d2.State)
	}
	if code, body := h.proxyGet("", map[string]string{e2bapi.HeaderSandboxID: sb.SandboxID, e2bapi.HeaderSandboxPort: "49983"}, "/health"); code != http.StatusBadGateway || !strings.Contains(body, e2bapi.ProxyNotFoundMessage) {
		t.Fatalf("proxy to a paused sandbox without autoResume: %d %s", code, body)
	}
	var running []e2bapi.ListedSandbox
	h.status(http.StatusOK, keyA, http.MethodGet, "/sandboxes", nil, &running)
	if len(running) != 0 {
		t.Fatalf("GET /sandboxes lists a paused sandbox: %+v", running)
	}
	var listed []e2bapi.ListedSandbox
	h.status(http.StatusOK, keyA, http.MethodGet, "/v2/sandboxes?state=paused&metadata="+url.QueryEscape("owner=test"), nil, &listed)
	if len(listed) != 1 || listed[0].SandboxID != sb.SandboxID || listed[0].State != e2bapi.StatePaused {
		t.Fatalf("list paused: %+v", listed)
	}
	h.status(http.StatusOK, keyA, http.MethodGet, "/v2/sandboxes?metadata="+url.QueryEscape("owner=other"), nil, &listed)
	if len(listed) != 0 {
		t.Fatalf("metadata filter owner=other: %+v", listed)
	}

	// Connect resumes a paused sandbox: 201.
	h.status(http.StatusCreated, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", e2bapi.ConnectSandbox{Timeout: 60}, nil)
	runTrue(t, h.envd(sb))
	// Deprecated resume after a pause: 201.
	h.status(http.StatusNoContent, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", nil, nil)
	h.status(http.StatusCreated, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/resume", map[string]int{"timeout": 60}, nil)

	// Kill: 204, then 404 everywhere, and the proxy's 502.
	h.status(http.StatusNoContent, keyA, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil)
	h.status(http.StatusNotFound, keyA, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil)
	var e e2bapi.Error
	h.status(http.StatusNotFound, keyA, http.MethodGet, "/sandboxes/"+sb.SandboxID, nil, &e)
	if e.Code != 404 || e.Message != e2bapi.NotFoundMessage(sb.SandboxID) {
		t.Fatalf("404 body %+v", e)
	}
	if code, body := h.proxyGet("", map[string]string{e2bapi.HeaderSandboxID: sb.SandboxID, e2bapi.HeaderSandboxPort: "49983"}, "/health"); code != http.StatusBadGateway || !strings.Contains(body, `"sandboxId":"`+sb.SandboxID+`"`) {
		t.Fatalf("proxy to a killed sandbox: %d %s", code, body)
	}
}

// TestCreateValidation checks the 400s of create.
func TestCreateValidation(t *testing.T) {
	h := start(t, newLocalProvider(t), "")
	for name, body := range map[string]any{
		"no template":       map[string]any{"timeout": 10},
		"negative timeout":  map[string]any{"templateID": "base", "timeout": -1},
		"too long":          map[string]any{"templateID": "base", "timeout": 25 * 3600},
		"memoryless resume": map[string]any{"templateID": "base", "autoPause": true, "autoPauseMemory": false, "autoResume": map[string]bool{"enabled": true}},
		"unknown template":  map[string]any{"templateID": "python-3.12"},
	} {
		var e e2bapi.Error
		if code := h.do(keyA, http.MethodPost, "/sandboxes", body, &e).StatusCode; code != http.StatusBadRequest || e.Code != 400 {
			t.Errorf("%s: %d %+v, want 400", name, code, e)
		}
	}
	h.status(http.StatusBadRequest, keyA, http.MethodGet, "/v2/sandboxes?limit=0", nil, nil)
	h.status(http.StatusBadRequest, keyA, http.MethodGet, "/v2/sandboxes?limit=101", nil, nil)
	h.status(http.StatusBadRequest, keyA, http.MethodGet, "/v2/sandboxes?state=gone", nil, nil)
}

// TestDefaultTimeoutKills checks E2B's 15 s default TTL is applied and the
// sandbox is killed at its end.
func TestTimeoutKills(t *testing.T) {
	h := start(t, newLocalProvider(t), "")
	sb := h.create(keyA, e2bapi.NewSandbox{})
	d, _ := h.detail(keyA, sb.SandboxID)
	if ttl := d.EndAt.Sub(d.StartedAt); ttl != DefaultTimeout {
		t.Fatalf("default TTL %v, want %v", ttl, DefaultTimeout)
	}
	h.status(http.StatusNoContent, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/timeout", e2bapi.SetTimeout{Timeout: 1}, nil)
	h.waitExpired(sb.SandboxID)
	if _, code := h.detail(keyA, sb.SandboxID); code != http.StatusNotFound {
		t.Fatalf("expired sandbox: GET %d, want 404", code)
	}
	if code, _ := h.proxyGet("", map[string]string{e2bapi.HeaderSandboxID: sb.SandboxID, e2bapi.HeaderSandboxPort: "49983"}, "/health"); code != http.StatusBadGateway {
		t.Fatalf("proxy to an expired sandbox: %d", code)
	}
}

// TestAutoPauseAndAutoResume: at its end an autoPause sandbox is paused
// with its files; proxy traffic resumes it when autoResume is on.
func TestAutoPauseAndAutoResume(t *testing.T) {
	h := start(t, newLocalProvider(t), "")
	sb := h.create(keyA, e2bapi.NewSandbox{Timeout: 1, AutoPause: ptr(true), AutoResume: &e2bapi.AutoResume{Enabled: true}, Secure: ptr(true)})
	c := h.envd(sb)
	ctx := context.Background()
	if err := c.Upload(ctx, "/workspace/kept.txt", strings.NewReader("kept"), envdclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitExpired(sb.SandboxID)
	d, code := h.detail(keyA, sb.SandboxID)
	if code != http.StatusOK || d.State != e2bapi.StatePaused || d.Lifecycle.OnTimeout != "pause" || !d.Lifecycle.AutoResume {
		t.Fatalf("after expiry: %d %+v", code, d)
	}
	// The proxy resumes it for the next request.
	res, err := c.Run(ctx, envdclient.Command{Cmd: "cat", Args: []string{"/workspace/kept.txt"}}, envdclient.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout.Bytes()); got != "kept" {
		t.Fatalf("file after auto-resume: %q", got)
	}
	if d, _ := h.detail(keyA, sb.SandboxID); d.State != e2bapi.StateRunning {
		t.Fatalf("after proxy traffic: state %q", d.State)
	}
}

// TestListPaging pages through /v2/sandboxes with X-Next-Token.
func TestListPaging(t *testing.T) {
	h := start(t, newLocalProvider(t), "")
	want := map[string]bool{}
	for range 3 {
		want[h.create(keyA, e2bapi.NewSandbox{Timeout: 600, Metadata: map[string]string{"set": "paging"}}).SandboxID] = true
	}
	h.create(keyB, e2bapi.NewSandbox{Timeout: 600, Metadata: map[string]string{"set": "paging"}})
	seen := map[string]bool{}
	path := "/v2/sandboxes?limit=2&metadata=" + url.QueryEscape("set=paging")
	pages := 0
	for {
		var page []e2bapi.ListedSandbox
		resp := h.do(keyA, http.MethodGet, path, nil, &page)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("list: %d", resp.StatusCode)
		}
		pages++
		for i, sb := range page {
			if seen[sb.SandboxID] || !want[sb.SandboxID] {
				t.Fatalf("page %d lists %s (seen %v, want %v)", pages, sb.SandboxID, seen, want)
			}
			if i > 0 && page[i-1].StartedAt.Before(sb.StartedAt) {
				t.Fatalf("page %d is not newest first", pages)
			}
			seen[sb.SandboxID] = true
		}
		next := resp.Header.Get(e2bapi.HeaderNextToken)
		if next == "" {
			break
		}
		path = "/v2/sandboxes?limit=2&metadata=" + url.QueryEscape("set=paging") + "&nextToken=" + url.QueryEscape(next)
	}
	if pages != 2 || len(seen) != 3 {
		t.Fatalf("%d pages, %d sandboxes; want 2 and 3", pages, len(seen))
	}
}

// TestRestartKeepsPausedSandbox: the records survive a restart of the
// server, and a paused sandbox is connected to afterwards with its files.
func TestRestartKeepsPausedSandbox(t *testing.T) {
	p := newLocalProvider(t)
	dir := t.TempDir()
	h := start(t, p, dir)
	sb := h.create(keyA, e2bapi.NewSandbox{Timeout: 600, Secure: ptr(true)})
	if err := h.envd(sb).Upload(context.Background(), "/workspace/f", strings.NewReader("x"), envdclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	h.status(http.StatusNoContent, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", nil, nil)
	if err := h.srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h2 := start(t, p, dir)
	d, code := h2.detail(keyA, sb.SandboxID)
	if code != http.StatusOK || d.State != e2bapi.StatePaused || d.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("after restart: %d %+v", code, d)
	}
	h2.status(http.StatusCreated, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", e2bapi.ConnectSandbox{Timeout: 60}, nil)
	if _, err := h2.envd(sb).Stat(context.Background(), "/workspace/f"); err != nil {
		t.Fatalf("file after restart and connect: %v", err)
	}
	h2.status(http.StatusNoContent, keyA, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil)
}

// TestLossBehindTheServersBack: a sandbox the provider lost (killed
// directly) is 404 on GET and 502 through the proxy, as E2B answers for a
// sandbox that died.
func TestLossBehindTheServersBack(t *testing.T) {
	p := newLocalProvider(t)
	h := start(t, p, "")
	sb := h.create(keyA, e2bapi.NewSandbox{Timeout: 600})
	h.srv.mu.Lock()
	providerID := h.srv.boxes[sb.SandboxID].rec.ProviderID
	h.srv.mu.Unlock()
	if err := p.Kill(context.Background(), providerID); err != nil {
		t.Fatal(err)
	}
	if code, _ := h.proxyGet("", map[string]string{e2bapi.HeaderSandboxID: sb.SandboxID, e2bapi.HeaderSandboxPort: "49983"}, "/health"); code != http.StatusBadGateway {
		t.Fatalf("proxy to a lost sandbox: %d, want 502", code)
	}
	if _, code := h.detail(keyA, sb.SandboxID); code != http.StatusNotFound {
		t.Fatalf("GET of a lost sandbox: %d, want 404", code)
	}
	h.status(http.StatusNotFound, keyA, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil)
}

// TestProxyStreams: output crosses the proxy while the process runs (no
// buffering until the end): the process prints, then waits for input that
// is sent only once its first line arrived.
func TestProxyStreams(t *testing.T) {
	h := start(t, newLocalProvider(t), "")
	c := h.envd(h.create(keyA, e2bapi.NewSandbox{Timeout: 600}))
	stdinR, stdinW := io.Pipe()
	seen := &lineWaiter{want: "first\n", then: func() { _, _ = stdinW.Write([]byte("go\n")); _ = stdinW.Close() }}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Run(ctx, envdclient.Command{Cmd: "sh", Args: []string{"-c", "echo first; read x; echo second $x"}, Stdin: stdinR},
		envdclient.RunOptions{Stdout: seen})
	if err != nil {
		t.Fatalf("%v (the first line did not cross the proxy before the end?)", err)
	}
	if got := string(res.Stdout.Bytes()); got != "first\nsecond go\n" {
		t.Fatalf("stdout %q", got)
	}
}

// lineWaiter calls then once the output so far starts with want.
type lineWaiter struct {
	buf  []byte
	want string
	then func()
	done bool
}

func (l *lineWaiter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	if !l.done && strings.HasPrefix(string(l.buf), l.want) {
		l.done = true
		l.then()
	}
	return len(p), nil
}

//go:build linux

package e2bserver

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// TestOtherKeyCannotTouch: key B gets 404 for everything about A's
// sandbox, and A's sandbox is unchanged afterwards.
func TestOtherKeyCannotTouch(t *testing.T) {
	h := start(t, newLocalProvider(t), "")
	a := h.create(keyA, e2bapi.NewSandbox{Timeout: 600, Metadata: map[string]string{"who": "a"}})
	id := a.SandboxID
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, "/sandboxes/" + id, nil},
		{http.MethodDelete, "/sandboxes/" + id, nil},
		{http.MethodPost, "/sandboxes/" + id + "/pause", nil},
		{http.MethodPost, "/sandboxes/" + id + "/resume", map[string]int{"timeout": 10}},
		{http.MethodPost, "/sandboxes/" + id + "/connect", e2bapi.ConnectSandbox{Timeout: 10}},
		{http.MethodPost, "/v2/sandboxes/" + id + "/connect", e2bapi.ConnectSandbox{Timeout: 10}},
		{http.MethodPost, "/sandboxes/" + id + "/timeout", e2bapi.SetTimeout{Timeout: 1}},
		{http.MethodPost, "/sandboxes/" + id + "/refreshes", e2bapi.Refresh{Duration: 10}},
	} {
		var e e2bapi.Error
		if code := h.do(keyB, c.method, c.path, c.body, &e).StatusCode; code != http.StatusNotFound || e.Message != e2bapi.NotFoundMessage(id) {
			t.Errorf("key B %s %s: %d %+v, want 404 as if absent", c.method, c.path, code, e)
		}
	}
	for _, path := range []string{"/v2/sandboxes", "/sandboxes", "/v2/sandboxes?state=running,paused"} {
		var l []e2bapi.ListedSandbox
		h.status(http.StatusOK, keyB, http.MethodGet, path, nil, &l)
		if len(l) != 0 {
			t.Errorf("key B lists %+v at %s", l, path)
		}
	}
	// Through the proxy with B's key: as if absent.
	code, _ := h.proxyGet("", map[string]string{e2bapi.HeaderSandboxID: id, e2bapi.HeaderSandboxPort: "49983", e2bapi.HeaderAPIKey: keyB}, "/health")
	if code != http.StatusBadGateway {
		t.Errorf("proxy with key B: %d, want 502", code)
	}
	d, code := h.detail(keyA, id)
	if code != http.StatusOK || d.State != e2bapi.StateRunning || !d.EndAt.Equal(d.StartedAt.Add(600e9)) {
		t.Fatalf("A's sandbox after B's attempts: %d %+v", code, d)
	}
	runTrue(t, h.envd(a))
}

// TestSecureSandboxNeedsToken: a secure sandbox's envd is reached only
// with its access token (or a valid /files signature); /health is exempt
// as in envd.
func TestSecureSandboxNeedsToken(t *testing.T) {
	h := start(t, newLocalProvider(t), "")
	sb := h.create(keyA, e2bapi.NewSandbox{Timeout: 600, Secure: ptr(true)})
	if len(sb.EnvdAccessToken) < 32 {
		t.Fatalf("secure sandbox token %q", sb.EnvdAccessToken)
	}
	route := map[string]string{e2bapi.HeaderSandboxID: sb.SandboxID, e2bapi.HeaderSandboxPort: "49983"}
	if code, _ := h.proxyGet("", route, "/health"); code != http.StatusNoContent {
		t.Fatalf("/health without token: %d, want 204", code)
	}
	for name, token := range map[string]string{"missing": "", "wrong": strings.Repeat("0", 64), "key instead": keyA} {
		c := h.envd(e2bapi.Sandbox{SandboxID: sb.SandboxID, EnvdAccessToken: token})
		_, err := c.Run(context.Background(), envdclient.Command{Cmd: "true"}, envdclient.RunOptions{})
		if err == nil {
			t.Errorf("%s token: the command ran", name)
		}
		hdr := map[string]string{e2bapi.HeaderSandboxID: sb.SandboxID, e2bapi.HeaderSandboxPort: "49983"}
		if token != "" {
			hdr[e2bapi.HeaderAccessToken] = token
		}
		if code, body := h.proxyGet("", hdr, "/files?path=/etc/hostname"); code != http.StatusUnauthorized || !strings.Contains(body, "unauthorized access") {
			t.Errorf("%s token: GET /files %d %s, want 401", name, code, body)
		}
	}
	runTrue(t, h.envd(sb))
}

// TestMalformedRoutesReachNothing: ids that are not lowercase
// alphanumeric, in the headers or the Host, get 400 "Invalid sandbox ID"
// before any provider call.
func TestMalformedRoutesReachNothing(t *testing.T) {
	h := start(t, newLocalProvider(t), "")
	sb := h.create(keyA, e2bapi.NewSandbox{Timeout: 600})
	upper := strings.ToUpper(sb.SandboxID)
	before := h.provider.calls.Load()
	bad := []string{upper, "../" + sb.SandboxID, sb.SandboxID + "/..", "a.b", "a b", "%2e%2e", "-", strings.Repeat("a", 65)}
	for _, id := range bad {
		code, body := h.proxyGet("", map[string]string{e2bapi.HeaderSandboxID: id, e2bapi.HeaderSandboxPort: "49983"}, "/health")
		if code != http.StatusBadRequest || !strings.Contains(body, "Invalid sandbox ID") {
			t.Errorf("header id %q: %d %s, want 400", id, code, body)
		}
	}
	for _, host := range []string{"49983-" + upper + ".e2b.local", "49983-" + sb.SandboxID + "_x.e2b.local", "49983-.e2b.local"} {
		code, body := h.proxyGet(host, nil, "/health")
		if code != http.StatusBadRequest || !strings.Contains(body, "Invalid sandbox ID") {
			t.Errorf("host %q: %d %s, want 400", host, code, body)
		}
	}
	for _, port := range []string{"", "x", "0", "049983", "70000"} {
		code, _ := h.proxyGet("sandbox.e2b.local", map[string]string{e2bapi.HeaderSandboxID: sb.SandboxID, e2bapi.HeaderSandboxPort: port}, "/health")
		if code != http.StatusBadRequest {
			t.Errorf("port %q: %d, want 400", port, code)
		}
	}
	if code, _ := h.proxyGet("sandbox.e2b.local", nil, "/health"); code != http.StatusBadRequest {
		t.Errorf("sandbox host without id: %d, want 400", code)
	}
	// The control plane's envd endpoints are not reachable.
	if code, _ := h.proxyGet("", map[string]string{e2bapi.HeaderSandboxID: sb.SandboxID, e2bapi.HeaderSandboxPort: "49983"}, "/init"); code != http.StatusNotFound {
		t.Errorf("/init through the proxy: %d, want 404", code)
	}
	if got := h.provider.calls.Load(); got != before {
		t.Fatalf("malformed routes made %d provider calls", got-before)
	}
	// The well-formed spellings work: subdomain and shared host.
	if code, _ := h.proxyGet("49983-"+sb.SandboxID+".e2b.local", nil, "/health"); code != http.StatusNoContent {
		t.Errorf("subdomain route: %d, want 204", code)
	}
	if code, _ := h.proxyGet("sandbox.e2b.local", map[string]string{e2bapi.HeaderSandboxID: sb.SandboxID, e2bapi.HeaderSandboxPort: "49983"}, "/health"); code != http.StatusNoContent {
		t.Errorf("shared host route: %d, want 204", code)
	}
	if code, body := h.proxyGet("", map[string]string{e2bapi.HeaderSandboxID: sb.SandboxID, e2bapi.HeaderSandboxPort: "8080"}, "/"); code != http.StatusBadGateway || !strings.Contains(body, "port is not open") {
		t.Errorf("closed port: %d %s, want 502 port not open", code, body)
	}
}

// TestWrongKeyNeverReachesProvider: no key, a wrong key or a key of
// another length get 401 with E2B's error body, and no provider call is
// made.
func TestWrongKeyNeverReachesProvider(t *testing.T) {
	h := start(t, newLocalProvider(t), "")
	for _, key := range []string{"", "e2b_wrong", keyA + "x", strings.ToUpper(keyA), keyA[:len(keyA)-1]} {
		for _, c := range []struct{ method, path string }{
			{http.MethodPost, "/sandboxes"},
			{http.MethodPost, "/v2/sandboxes"},
			{http.MethodGet, "/v2/sandboxes"},
			{http.MethodGet, "/sandboxes/abc"},
			{http.MethodDelete, "/sandboxes/abc"},
			{http.MethodPost, "/sandboxes/abc/pause"},
			{http.MethodGet, "/nowhere"},
		} {
			var e e2bapi.Error
			code := h.do(key, c.method, c.path, e2bapi.NewSandbox{TemplateID: "base"}, &e).StatusCode
			if code != http.StatusUnauthorized || e.Code != 401 || e.Message == "" {
				t.Errorf("key %q %s %s: %d %+v, want 401", key, c.method, c.path, code, e)
			}
		}
	}
	if got := h.provider.calls.Load(); got != 0 {
		t.Fatalf("unauthenticated requests made %d provider calls", got)
	}
}

//go:build linux

package local

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

func TestNoProxyKeepsListedLoopbackOnTheProxy(t *testing.T) {
	for in, want := range map[string]string{
		"allow=pypi.org":                     "localhost,127.0.0.1,::1",
		"allow=127.0.0.1:8080":               "localhost,::1",
		"allow=localhost:1,[::1]:2,pypi.org": "127.0.0.1",
	} {
		p, err := manage.ParseNetworkPolicy(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := noProxyFor(p); got != want {
			t.Errorf("%s: NO_PROXY %q, want %q", in, got, want)
		}
	}
}

// An unisolated sandbox shares the host's network: no proxy could
// restrict it, so an allow policy is refused rather than pretended.
func TestAllowPolicyNeedsBwrap(t *testing.T) {
	p := newProvider(t, Config{Isolation: IsolationNone})
	policy, err := manage.ParseNetworkPolicy("allow=pypi.org")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Create(testCtx(t), manage.SandboxConfig{Network: policy})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "needs bwrap") {
		t.Fatalf("Create: %v; want InvalidArgument saying it needs bwrap", err)
	}
	bad := manage.NetworkPolicy{Mode: manage.NetworkAllow}
	if _, err := p.Create(testCtx(t), manage.SandboxConfig{Network: bad}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("Create with an empty allow list: %v; want InvalidArgument", err)
	}
}

// A sandbox with an allow policy reaches an allowed loopback service
// through the proxy and nothing else; its proxy socket sits in a
// directory the sandbox sees read-only, and the proxy stops with the
// sandbox.
func TestAllowPolicySandbox(t *testing.T) {
	p := needBwrap(t, Config{})
	ok := startHTTP(t, "ALLOWED")
	other := startHTTP(t, "OTHER")
	policy, err := manage.ParseNetworkPolicy("allow=" + ok)
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, p, manage.SandboxConfig{Network: policy})
	if sb.Network == nil || sb.Network.String() != policy.String() {
		t.Errorf("Sandbox.Network %v, want %s", sb.Network, policy)
	}
	c := connectTo(t, p, sb.ID)
	out := shOK(t, c, "curl -sS http://"+ok+"/; echo; curl -sS http://"+other+"/; touch /.sandbox-mcp/egress/x 2>&1 || true")
	if !strings.Contains(out, "ALLOWED") || strings.Contains(out, "OTHER") ||
		!strings.Contains(out, "sandbox-mcp egress policy refused "+other) || !strings.Contains(out, "Read-only file system") {
		t.Fatalf("inside: %s", out)
	}
	if err := p.Kill(testCtx(t), sb.ID); err != nil {
		t.Fatal(err)
	}
}

// startHTTP serves body on a loopback port and returns its host:port.
func startHTTP(t *testing.T, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

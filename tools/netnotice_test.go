package tools

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

func TestNetworkNoticeText(t *testing.T) {
	allow, err := manage.ParseNetworkPolicy("allow=127.0.0.1:8080,pypi.org")
	if err != nil {
		t.Fatal(err)
	}
	off := manage.NetworkPolicy{}
	for _, c := range []struct {
		name   string
		policy manage.NetworkPolicy
		output string
		want   []string // substrings; none: no notice
	}{
		{"off pip", off, "WARNING: Retrying ... NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')", []string{"no network access", "--network on", "--network allow="}},
		{"off curl", off, "curl: (6) Could not resolve host: example.com", []string{"no network access"}},
		{"off python", off, "socket.gaierror: [Errno -2] Name or service not known", []string{"no network access"}},
		{"off quiet", off, "hello\n", nil},
		{"on", manage.NetworkPolicyOn(), "curl: (6) Could not resolve host: example.com", nil},
		{"allow pip", allow, "ProxyError('Cannot connect to proxy.', OSError('Tunnel connection failed: 403 sandbox-mcp egress policy refused files.pythonhosted.org:443'))", []string{"refused files.pythonhosted.org:443", "allows only 127.0.0.1:8080,pypi.org"}},
		{"allow body", allow, "sandbox-mcp egress policy refused [::1]:80: not on the allow list\nsandbox-mcp egress policy refused 1.1.1.1:80: x\nsandbox-mcp egress policy refused 1.1.1.1:80: x", []string{"refused [::1]:80, 1.1.1.1:80:"}},
		{"allow curl", allow, "curl: (56) CONNECT tunnel failed, response 403", []string{"HTTP 403", "allows only 127.0.0.1:8080,pypi.org"}},
		{"allow bypass", allow, "nc: getaddrinfo for host \"example.com\" port 80: Temporary failure in name resolution", []string{"no direct network", "HTTP_PROXY"}},
		{"allow quiet", allow, "Successfully downloaded tinypkg", nil},
	} {
		got := networkNoticeText(c.policy, c.output)
		if len(c.want) == 0 {
			if got != "" {
				t.Errorf("%s: unexpected notice %q", c.name, got)
			}
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: notice %q lacks %q", c.name, got, w)
			}
		}
	}
}

func TestInstructionsSayTheNetworkPolicy(t *testing.T) {
	allow, _ := manage.ParseNetworkPolicy("allow=pypi.org:443")
	for _, c := range []struct {
		policy manage.NetworkPolicy
		want   string
	}{
		{manage.NetworkPolicy{}, "no network access"},
		{manage.NetworkPolicyOn(), "outbound network access"},
		{allow, "reaches only pypi.org:443"},
	} {
		cfg := DefaultConfig()
		cfg.Network = c.policy
		text := Instructions(cfg)
		if n := strings.Count(text, "Network: "); n != 1 || !strings.Contains(text, c.want) {
			t.Errorf("%s: instructions lack %q (or say Network %d times):\n%s", c.policy, c.want, n, text)
		}
	}
}

func TestNetworkMismatch(t *testing.T) {
	on := manage.NetworkPolicyOn()
	off := manage.NetworkPolicy{Mode: manage.NetworkOff}
	if w := networkMismatch(manage.Sandbox{Network: &on}, manage.NetworkPolicy{}); !strings.Contains(w, "made with network policy on; the server's is now off") {
		t.Errorf("on vs off: %q", w)
	}
	if w := networkMismatch(manage.Sandbox{Network: &off}, manage.NetworkPolicy{}); w != "" {
		t.Errorf("off vs zero: %q", w)
	}
	if w := networkMismatch(manage.Sandbox{}, on); w != "" {
		t.Errorf("unknown: %q", w)
	}
}

package manage_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

func TestParseNetworkPolicy(t *testing.T) {
	good := map[string]string{
		"":                    "off",
		"off":                 "off",
		"false":               "off",
		"on":                  "on",
		"true":                "on",
		"allow=pypi.org":      "allow=pypi.org",
		"allow=PyPI.org.:443": "allow=pypi.org:443",
		"allow=127.0.0.1:8080, files.pythonhosted.org": "allow=127.0.0.1:8080,files.pythonhosted.org",
		"allow=[::1]:8080,[2001:db8::1]":               "allow=[::1]:8080,[2001:db8::1]",
		"allow=*.example.com,a.b,a.b":                  "allow=*.example.com,a.b",
	}
	for in, want := range good {
		p, err := manage.ParseNetworkPolicy(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if p.String() != want {
			t.Errorf("%q: got %q, want %q", in, p.String(), want)
		}
		if err := p.Check(); err != nil {
			t.Errorf("%q: Check: %v", in, err)
		}
	}
	bad := map[string]string{
		"maybe":              "want off, on or allow",
		"allow=":             "empty",
		"allow=,":            "empty",
		"allow=bad_host!":    "character",
		"allow=-a.com":       "hyphen",
		"allow=a..b":         "empty or too long label",
		"allow=host:0":       "port",
		"allow=host:70000":   "port",
		"allow=host:":        "empty port",
		"allow=host:http":    "port",
		"allow=::1":          "brackets",
		"allow=[::1":         "unclosed",
		"allow=[1.2.3.4]:80": "not an IPv6",
		"allow=999.1.1.1":    "neither",
		"allow=" + strings.Repeat("a", 64) + ".com": "too long",
	}
	for in, want := range bad {
		_, err := manage.ParseNetworkPolicy(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error with %q", in, err, want)
		}
	}
}

func TestHostPortMatches(t *testing.T) {
	p, err := manage.ParseNetworkPolicy("allow=pypi.org,127.0.0.1:8080,*.pythonhosted.org:443")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		port uint16
		want bool
	}{
		{"pypi.org", 443, true}, {"pypi.org", 80, true}, {"pypi.org", 22, false},
		{"www.pypi.org", 443, false}, {"127.0.0.1", 8080, true}, {"127.0.0.1", 8081, false},
		{"localhost", 8080, false}, {"files.pythonhosted.org", 443, true}, {"pythonhosted.org", 443, false},
		{"files.pythonhosted.org", 80, false},
	} {
		if got := p.Permits(c.host, c.port); got != c.want {
			t.Errorf("Permits(%s, %d) = %v", c.host, c.port, got)
		}
	}
}

func TestNetworkPolicyJSONReadsOldBool(t *testing.T) {
	var cfg manage.SandboxConfig
	if err := json.Unmarshal([]byte(`{"Network":true}`), &cfg); err != nil || !cfg.Network.IsOn() {
		t.Fatalf("true: %+v %v", cfg.Network, err)
	}
	if err := json.Unmarshal([]byte(`{"Network":false}`), &cfg); err != nil || !cfg.Network.IsOff() {
		t.Fatalf("false: %+v %v", cfg.Network, err)
	}
	p, _ := manage.ParseNetworkPolicy("allow=pypi.org:443")
	data, err := json.Marshal(manage.SandboxConfig{Network: p})
	if err != nil {
		t.Fatal(err)
	}
	var back manage.SandboxConfig
	if err := json.Unmarshal(data, &back); err != nil || back.Network.String() != "allow=pypi.org:443" {
		t.Fatalf("round trip: %s → %+v %v", data, back.Network, err)
	}
}

package e2b

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// newTestProvider is a provider of the API at url, with instant retries.
func newTestProvider(t *testing.T, url string, mod func(*Config)) *Provider {
	t.Helper()
	cfg := Config{APIKey: testKey, APIURL: url, Owner: "me", ClientOptions: []Option{WithBackoff(time.Millisecond)}}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// apiStub answers the list call New makes and hands everything else to
// handle.
func apiStub(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) *faultServer {
	return newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.URL.Path == "/v2/sandboxes" {
			writeJSON(w, http.StatusOK, []e2bapi.ListedSandbox{})
			return
		}
		handle(w, r)
	})
}

func TestEndpointAsTheSDKs(t *testing.T) {
	ptr := func(s string) *string { return &s }
	for _, tc := range []struct {
		name          string
		domain        string
		sandboxURL    string
		sandboxDomain *string
		want          string
	}{
		{name: "e2b cloud: shared host", want: "https://sandbox.e2b.app"},
		{name: "e2b.dev: shared host", domain: "e2b.dev", want: "https://sandbox.e2b.dev"},
		{name: "self-hosted: per-sandbox host", domain: "sandboxes.example.com", want: "https://49983-abc123.sandboxes.example.com"},
		{name: "the sandbox's own domain", sandboxDomain: ptr("eu.example.net"), want: "https://49983-abc123.eu.example.net"},
		{name: "--e2b-sandbox-url", domain: "example.com", sandboxURL: "http://127.0.0.1:3000/", want: "http://127.0.0.1:3000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := apiStub(t, func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, http.StatusOK, e2bapi.SandboxDetail{
					ListedSandbox:   e2bapi.ListedSandbox{SandboxID: "abc123", State: e2bapi.StateRunning, EnvdVersion: "0.2.4"},
					EnvdAccessToken: "tok", Domain: tc.sandboxDomain,
				})
			})
			p := newTestProvider(t, fs.URL, func(c *Config) { c.Domain, c.SandboxURL = tc.domain, tc.sandboxURL })
			ep, err := p.Endpoint(t.Context(), "abc123")
			if err != nil {
				t.Fatal(err)
			}
			if ep.URL != tc.want || ep.RoutingID != "abc123" || ep.RoutingPort != 49983 || ep.AccessToken != "tok" || ep.EnvdVersion != "0.2.4" {
				t.Fatalf("endpoint %+v, want URL %s with routing headers, token and version", ep, tc.want)
			}
		})
	}
}

func TestCreateRequest(t *testing.T) {
	var got e2bapi.NewSandbox
	fs := apiStub(t, func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		writeJSON(w, http.StatusCreated, e2bapi.Sandbox{SandboxID: "new1", EnvdVersion: "0.2.4", EnvdAccessToken: "tok"})
	})
	p := newTestProvider(t, fs.URL, func(c *Config) { c.Template, c.Lifetime = "my-template", 10*time.Minute })
	sb, err := p.Create(t.Context(), manage.SandboxConfig{Key: "http:alice:s1", Named: true, Generation: 3, Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "new1" || sb.State != manage.StateRunning || sb.Workdir != DefaultWorkdir || sb.Provider != Name {
		t.Fatalf("sandbox %+v", sb)
	}
	if got.TemplateID != "my-template" || got.Timeout != 600 || got.AutoPause == nil || !*got.AutoPause ||
		got.AutoResume == nil || !got.AutoResume.Enabled || got.Secure == nil || !*got.Secure ||
		got.AllowInternet == nil || *got.AllowInternet || got.EnvVars["A"] != "1" {
		t.Fatalf("create body %+v", got)
	}
	for k, v := range map[string]string{MetaOwner: "me", MetaKey: "http:alice:s1", MetaNamed: "true", MetaGeneration: "3", MetaProvider: "e2b"} {
		if got.Metadata[k] != v {
			t.Errorf("metadata %s = %q, want %q", k, got.Metadata[k], v)
		}
	}
	// The answer's token is remembered: Endpoint needs no further call.
	fs.Close()
	if ep, err := p.Endpoint(t.Context(), "new1"); err != nil || ep.AccessToken != "tok" {
		t.Fatalf("endpoint after create: %+v, %v", ep, err)
	}
}

func TestInfoStates(t *testing.T) {
	for _, tc := range []struct {
		status int
		state  e2bapi.SandboxState
		want   manage.State
		fail   bool
	}{
		{status: http.StatusOK, state: e2bapi.StateRunning, want: manage.StateRunning},
		{status: http.StatusOK, state: e2bapi.StatePaused, want: manage.StatePaused},
		{status: http.StatusNotFound, want: manage.StateGone},
		{status: http.StatusOK, state: "snapshotting", fail: true},
		{status: http.StatusInternalServerError, fail: true},
		{status: http.StatusUnauthorized, fail: true},
	} {
		fs := apiStub(t, func(w http.ResponseWriter, r *http.Request) {
			if tc.status != http.StatusOK {
				writeError(w, tc.status, "no")
				return
			}
			writeJSON(w, http.StatusOK, e2bapi.SandboxDetail{ListedSandbox: e2bapi.ListedSandbox{SandboxID: "abc", State: tc.state}})
		})
		p := newTestProvider(t, fs.URL, func(c *Config) { c.ClientOptions = append(c.ClientOptions, WithRetries(0)) })
		sb, err := p.Info(t.Context(), "abc")
		if tc.fail {
			if err == nil {
				t.Errorf("status %d state %q: %+v, want an inconclusive error", tc.status, tc.state, sb)
			}
			continue
		}
		if err != nil || sb.State != tc.want {
			t.Errorf("status %d state %q: %+v, %v; want %s", tc.status, tc.state, sb, err, tc.want)
		}
	}
}

func TestPauseKillResumeSemantics(t *testing.T) {
	var paths []string
	fs := apiStub(t, func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		switch {
		case strings.HasSuffix(r.URL.Path, "/pause"):
			writeError(w, http.StatusConflict, "already paused")
		case r.Method == http.MethodDelete:
			writeError(w, http.StatusNotFound, e2bapi.NotFoundMessage("abc"))
		case strings.HasSuffix(r.URL.Path, "/connect"):
			writeJSON(w, http.StatusCreated, e2bapi.Sandbox{SandboxID: "abc", EnvdAccessToken: "t2"})
		}
	})
	p := newTestProvider(t, fs.URL, nil)
	if err := p.Pause(t.Context(), "abc"); err != nil {
		t.Errorf("Pause on a 409: %v, want success", err)
	}
	if err := p.Kill(t.Context(), "abc"); err != nil {
		t.Errorf("Kill on a 404: %v, want success", err)
	}
	if err := p.Resume(t.Context(), "abc"); err != nil {
		t.Errorf("Resume: %v", err)
	}
	want := "POST /sandboxes/abc/pause,DELETE /sandboxes/abc,POST /sandboxes/abc/connect"
	if strings.Join(paths, ",") != want {
		t.Errorf("calls %v, want %s", paths, want)
	}
	if p.KeepAliveInterval() != DefaultLifetime/3 {
		t.Errorf("KeepAliveInterval %v", p.KeepAliveInterval())
	}
}

func TestAPIURL(t *testing.T) {
	for _, tc := range [][3]string{{"", "", "https://api.e2b.app"}, {"", "e2b.dev", "https://api.e2b.dev"}, {"http://localhost:3000", "x", "http://localhost:3000"}} {
		if got := APIURL(tc[0], tc[1]); got != tc[2] {
			t.Errorf("APIURL(%q, %q) = %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
}

//go:build linux

package envdclient_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

func TestTransportRules(t *testing.T) {
	for _, bad := range []string{"http://10.1.2.3:49983", "http://example.com", "ftp://127.0.0.1", "unix:", "https://h/path", "https://user:pw@h"} {
		if _, err := envdclient.New(bad); err == nil {
			t.Errorf("New(%q) succeeded; want refused", bad)
		}
	}
	for _, good := range []string{"http://127.0.0.1:1", "http://localhost:49983", "http://[::1]:2", "https://49983-abc.e2b.app", "unix:/tmp/x.sock"} {
		if _, err := envdclient.New(good); err != nil {
			t.Errorf("New(%q) = %v", good, err)
		}
	}

	// A redirect to another origin is refused, token or not.
	var leaked bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { leaked = true }))
	defer other.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	c := newClient(t, redirector.URL, envdclient.WithAccessToken("secret"))
	err := c.Health(t.Context())
	if err == nil || !strings.Contains(err.Error(), "leaves the configured origin") || leaked {
		t.Fatalf("Health through a cross-origin redirect = %v (leaked=%v)", err, leaked)
	}

	// A daemon with a token: no token → unauthenticated; right token works.
	d := envdtest.Serve(t, "unix", daemon.Config{AccessToken: "tok"})
	_, err = newClient(t, d.Endpoint).Run(t.Context(), sh("true"), envdclient.RunOptions{})
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Run without the token = %v; want unauthenticated", err)
	}
	if _, err := newClient(t, d.Endpoint).Stat(t.Context(), ""); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Stat without the token = %v; want unauthenticated", err)
	}
	if err := newClient(t, d.Endpoint).Upload(t.Context(), "x", strings.NewReader("x"), envdclient.UploadOptions{}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Upload without the token = %v; want unauthenticated", err)
	}
	if _, err := newClient(t, d.Endpoint, envdclient.WithAccessToken("tok")).Run(t.Context(), sh("true"), envdclient.RunOptions{}); err != nil {
		t.Fatalf("Run with the token = %v", err)
	}
}

func TestOldEnvdRefusesFiniteStdin(t *testing.T) {
	d := envdtest.Serve(t, "unix", daemon.Config{})
	c := newClient(t, d.Endpoint, envdclient.WithEnvdVersion("0.4.1"))
	_, err := c.Run(t.Context(), envdclient.Command{Cmd: "cat", Stdin: strings.NewReader("x")}, envdclient.RunOptions{})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "0.5.2") {
		t.Fatalf("Run with stdin on envd 0.4.1 = %v; want failed_precondition naming 0.5.2", err)
	}
	if err := c.CloseStdin(t.Context(), envdclient.ByPid(1)); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("CloseStdin on envd 0.4.1 = %v; want unimplemented", err)
	}
	v, err := newClient(t, d.Endpoint).Version(t.Context())
	if err != nil || v != daemon.Version {
		t.Fatalf("Version from /health = %q, %v", v, err)
	}
}

//go:build linux

package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestE2BWrongKey: the real binary with --provider e2b and a key the API
// refuses fails at once with a clear error (serve and call at start,
// doctor in its check) and never prints the key.
func TestE2BWrongKey(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"code":401,"message":"Invalid API key"}`))
	}))
	defer api.Close()
	n := newNewcomer(t)
	const key = "e2b_0000wrongkey0000"
	flags := " --provider e2b --e2b-api-url " + api.URL + " "
	for _, line := range []string{
		"./sandbox-mcp call" + flags + "--e2b-api-key " + key + " workspace_info",
		"E2B_API_KEY=" + key + " ./sandbox-mcp serve" + flags + "</dev/null",
	} {
		out, errs, code := n.run(line, nil)
		if code == 0 || !strings.Contains(errs, "the API key was refused: check --e2b-api-key or E2B_API_KEY") {
			t.Errorf("%s: exit %d, want a clear refusal\nstdout: %s\nstderr: %s", line, code, out, errs)
		}
		if strings.Contains(out+errs, key) {
			t.Errorf("%s: the key is printed:\n%s%s", line, out, errs)
		}
	}
	out, errs, code := n.run("E2B_API_KEY="+key+" ./sandbox-mcp doctor"+flags, nil)
	if code != 1 || !strings.Contains(out, "refuses the key") || strings.Contains(out+errs, key) {
		t.Errorf("doctor with a wrong key: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = n.run("E2B_API_KEY= ./sandbox-mcp call --provider e2b workspace_info", nil)
	if code == 0 || !strings.Contains(errs, "--provider e2b needs an API key") {
		t.Errorf("call --provider e2b without a key: exit %d\n%s%s", code, out, errs)
	}
}

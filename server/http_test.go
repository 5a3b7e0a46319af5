//go:build linux

package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

func TestHTTPBothRevisions(t *testing.T) {
	e := newEnv(t, envOptions{})

	legacy := e.client(t, clientOptions{legacy: true})
	if v := legacy.ProtocolVersion(); v != mcp.ProtocolVersion20251125 {
		t.Fatalf("legacy client negotiated %q", v)
	}
	sid := legacy.GetSessionId()
	if sid == "" {
		t.Fatal("legacy client has no session id")
	}
	modern := e.client(t, clientOptions{})
	if v := modern.ProtocolVersion(); v != mcp.ProtocolVersion20260728 {
		t.Fatalf("default client negotiated %q, want %s", v, mcp.ProtocolVersion20260728)
	}
	if id := modern.GetSessionId(); id != "" {
		t.Fatalf("stateless client got session id %q", id)
	}

	for name, c := range map[string]*mcpClient{"2025-11-25": legacy, "2026-07-28": modern} {
		list, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
		if err != nil {
			t.Fatalf("%s: tools/list: %v", name, err)
		}
		names := make([]string, len(list.Tools))
		for i, tool := range list.Tools {
			names[i] = tool.Name
		}
		for _, want := range []string{"workspace_exec", "test_whoami"} {
			if !slices.Contains(names, want) {
				t.Fatalf("%s: tools/list lacks %s: %v", name, want, names)
			}
		}
	}

	var lw, mw whoami
	legacy.ok(t, "test_whoami", nil, &lw)
	if want := SessionKey(LocalPrincipal, sid); lw.Key != want || lw.Named {
		t.Fatalf("session call bound to %+v, want anonymous %s", lw, want)
	}
	modern.ok(t, "test_whoami", nil, &mw)
	if want := NamedKey(LocalPrincipal, DefaultWorkspaceName); mw.Key != want || !mw.Named {
		t.Fatalf("stateless call bound to %+v, want named %s", mw, want)
	}
	if lw.SandboxID == mw.SandboxID {
		t.Fatal("session and default workspaces share a sandbox")
	}

	// A real tool over both revisions.
	for name, c := range map[string]*mcpClient{"2025-11-25": legacy, "2026-07-28": modern} {
		var out struct {
			ExitCode *int   `json:"exit_code"`
			Stdout   string `json:"stdout"`
		}
		c.ok(t, "workspace_exec", map[string]any{"command": "echo hello"}, &out)
		if out.ExitCode == nil || *out.ExitCode != 0 || out.Stdout != "hello\n" {
			t.Fatalf("%s: workspace_exec: %+v", name, out)
		}
	}
}

func TestHTTPWorkspaceHeader(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.client(t, clientOptions{workspace: "proj-a"})
	a2 := e.client(t, clientOptions{workspace: "proj-a"})
	b := e.client(t, clientOptions{workspace: "proj.b_2"})
	var wa, wa2, wb whoami
	a.ok(t, "test_whoami", nil, &wa)
	a2.ok(t, "test_whoami", nil, &wa2)
	b.ok(t, "test_whoami", nil, &wb)
	if wa.Key != NamedKey(LocalPrincipal, "proj-a") || !wa.Named {
		t.Fatalf("bound to %+v", wa)
	}
	if wa.SandboxID != wa2.SandboxID {
		t.Fatal("two stateless clients naming one workspace got different sandboxes")
	}
	if wb.SandboxID == wa.SandboxID {
		t.Fatal("different workspace names share a sandbox")
	}
	// A session client naming a workspace acts on it, not on its session's.
	s := e.client(t, clientOptions{legacy: true, workspace: "proj-a"})
	var ws whoami
	s.ok(t, "test_whoami", nil, &ws)
	if ws.SandboxID != wa.SandboxID {
		t.Fatalf("session with %s: proj-a bound to %+v", WorkspaceHeader, ws)
	}

	for _, bad := range []string{"a/b", "..", strings.Repeat("x", 65), "a b", "a:b"} {
		resp, body := e.rawRequest(t, http.MethodPost, "/mcp", initializeBody, map[string]string{WorkspaceHeader: bad})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, WorkspaceHeader) {
			t.Errorf("%s %q: %d %s, want 400 naming the header", WorkspaceHeader, bad, resp.StatusCode, body)
		}
	}
}

func TestValidWorkspaceName(t *testing.T) {
	for name, want := range map[string]bool{
		"default": true, "a": true, "A.b_c-9": true, strings.Repeat("z", 64): true, ".hidden": true,
		"": false, ".": false, "..": false, strings.Repeat("z", 65): false, "a/b": false, "a:b": false, "é": false, "a b": false,
	} {
		if got := ValidWorkspaceName(name); got != want {
			t.Errorf("ValidWorkspaceName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, envOptions{tokens: map[string]string{"token-alice-0123456789": "alice"}})
	good := map[string]string{"Authorization": "Bearer token-alice-0123456789"}

	resp, body := e.rawRequest(t, http.MethodPost, "/mcp", initializeBody, nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="sandbox-mcp"` {
		t.Fatalf("no token: WWW-Authenticate %q", got)
	}
	resp, body = e.rawRequest(t, http.MethodPost, "/mcp", initializeBody, map[string]string{"Authorization": "Bearer wrong"})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) || !strings.Contains(got, `realm="sandbox-mcp"`) {
		t.Fatalf("wrong token: WWW-Authenticate %q", got)
	}
	resp, _ = e.rawRequest(t, http.MethodPost, "/mcp", initializeBody, map[string]string{"Authorization": "Basic dTpw"})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("basic auth: %d", resp.StatusCode)
	}
	// GET and DELETE need the token too.
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		if resp, _ := e.rawRequest(t, m, "/mcp", "", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s without token: %d", m, resp.StatusCode)
		}
	}
	if resp, _ := e.rawRequest(t, http.MethodPost, "/mcp", initializeBody, good); resp.StatusCode != http.StatusOK {
		t.Fatalf("good token: %d", resp.StatusCode)
	}
	if resp, _ := e.rawRequest(t, http.MethodGet, "/metrics", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/metrics without token: %d", resp.StatusCode)
	}
	if resp, _ := e.rawRequest(t, http.MethodGet, "/metrics", "", good); resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics with token: %d", resp.StatusCode)
	}
	if resp, body := e.rawRequest(t, http.MethodGet, "/healthz", "", nil); resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", resp.StatusCode, body)
	}

	// A CORS preflight carries no credentials: it is answered before auth,
	// and the 401 of the actual request carries CORS headers.
	web := newEnv(t, envOptions{tokens: map[string]string{"token-web-0123456789": "web"}, origins: []string{"https://app.example.com"}})
	pre := map[string]string{"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST"}
	if resp, _ := web.rawRequest(t, http.MethodOptions, "/mcp", "", pre); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("preflight with auth on: %d", resp.StatusCode)
	}
	resp, _ = web.rawRequest(t, http.MethodPost, "/mcp", initializeBody, map[string]string{"Origin": "https://app.example.com"})
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") == "" {
		t.Fatalf("browser request without token: %d %v", resp.StatusCode, resp.Header)
	}

	// The mcp-go client gets an error without a token and works with one.
	if _, err := e.newClient(clientOptions{}); err == nil {
		t.Fatal("client without token initialised")
	}
	c := e.client(t, clientOptions{token: "token-alice-0123456789"})
	var w whoami
	c.ok(t, "test_whoami", nil, &w)
	if w.Key != NamedKey("alice", DefaultWorkspaceName) {
		t.Fatalf("bound to %+v", w)
	}
}

func TestOrigin(t *testing.T) {
	e := newEnv(t, envOptions{origins: []string{"https://app.example.com", "http://localhost:3000"}})
	for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		resp, body := e.rawRequest(t, m, "/mcp", initializeBody, map[string]string{"Origin": "https://evil.example"})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s from a foreign origin: %d %s", m, resp.StatusCode, body)
		}
	}
	if resp, _ := e.rawRequest(t, http.MethodGet, "/metrics", "", map[string]string{"Origin": "null"}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("/metrics from origin null: %d", resp.StatusCode)
	}
	for _, o := range []string{"https://app.example.com", "http://localhost:3000"} {
		if resp, body := e.rawRequest(t, http.MethodPost, "/mcp", initializeBody, map[string]string{"Origin": o}); resp.StatusCode != http.StatusOK {
			t.Fatalf("allowed origin %s: %d %s", o, resp.StatusCode, body)
		}
	}
	if resp, _ := e.rawRequest(t, http.MethodPost, "/mcp", initializeBody, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("no origin: %d", resp.StatusCode)
	}
	// DNS rebinding: a foreign Host on a loopback connection, on every path.
	for _, path := range []string{"/mcp", "/metrics", "/healthz"} {
		if resp, _ := e.rawRequest(t, http.MethodGet, path, "", map[string]string{"Host": "evil.example:8765"}); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("foreign Host on loopback for %s: %d", path, resp.StatusCode)
		}
	}
	if resp, _ := e.rawRequest(t, http.MethodGet, "/healthz", "", map[string]string{"Host": "localhost:8765"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("Host localhost on loopback: %d", resp.StatusCode)
	}

	// CORS for allowed origins: preflights answered before auth, headers on
	// responses.
	pre := map[string]string{"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization, mcp-session-id, sandbox-workspace"}
	resp, _ := e.rawRequest(t, http.MethodOptions, "/mcp", "", pre)
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), WorkspaceHeader) {
		t.Fatalf("preflight from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	pre["Origin"] = "https://evil.example"
	if resp, _ := e.rawRequest(t, http.MethodOptions, "/mcp", "", pre); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("preflight from a foreign origin: %d", resp.StatusCode)
	}
	resp, _ = e.rawRequest(t, http.MethodPost, "/mcp", initializeBody, map[string]string{"Origin": "http://localhost:3000"})
	if resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Mcp-Session-Id") {
		t.Fatalf("CORS headers on an allowed origin's POST: %v", resp.Header)
	}

	any := newEnv(t, envOptions{origins: []string{"*"}})
	if resp, _ := any.rawRequest(t, http.MethodPost, "/mcp", initializeBody, map[string]string{"Origin": "https://whatever.example"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("origin with *: %d", resp.StatusCode)
	}
}

func TestNormalizeOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://App.Example.com":     "https://app.example.com",
		"https://app.example.com:443": "https://app.example.com",
		"http://localhost:80/":        "http://localhost",
		"http://127.0.0.1:8080":       "http://127.0.0.1:8080",
		"http://[::1]:3000":           "http://[::1]:3000",
	} {
		got, err := normalizeOrigin(in)
		if err != nil || got != want {
			t.Errorf("normalizeOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"app.example.com", "ftp://x", "https://x/path", "https://", "https://u@x"} {
		if _, err := normalizeOrigin(bad); err == nil {
			t.Errorf("normalizeOrigin(%q) accepted", bad)
		}
	}
}

func TestBodyLimit(t *testing.T) {
	e := newEnv(t, envOptions{maxBody: 4096})
	big := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"` + strings.Repeat("x", 5000) + `","version":"0"}}}`
	resp, body := e.rawRequest(t, http.MethodPost, "/mcp", big, nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(body, `"jsonrpc":"2.0"`) || !strings.Contains(body, "4096") {
		t.Fatalf("413 body is not a JSON-RPC error naming the limit: %s", body)
	}
	sid := e.rawSession(t, nil)
	bigList := `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"pad":"` + strings.Repeat("x", 5000) + `"}}}`
	// Without Content-Length (chunked) the limit holds as well, whether the
	// server buffers the body to look into it (no session id: is it
	// initialize?) or leaves the reading to mcp-go (a session id, or the
	// 2026-07-28 header).
	for name, tc := range map[string]struct {
		body    string
		headers map[string]string
	}{
		"initialize": {big, nil},
		"in a session": {bigList, map[string]string{
			mcpserver.HeaderKeySessionID: sid, mcp.HeaderProtocolVersion: mcp.ProtocolVersion20251125}},
		"stateless": {bigList, map[string]string{mcp.HeaderProtocolVersion: mcp.ProtocolVersion20260728}},
	} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, e.base+"/mcp", struct{ *strings.Reader }{strings.NewReader(tc.body)})
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		req.ContentLength = -1
		r2, err := (&http.Client{Transport: e.rt}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r2.Body)
		r2.Body.Close()
		if r2.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"jsonrpc":"2.0"`) || !strings.Contains(string(b), "4096") {
			t.Errorf("%s: oversized chunked body: %d %s, want 413 with a JSON-RPC error naming the limit", name, r2.StatusCode, b)
		}
	}
	// The server keeps serving, on every path.
	if resp, _ := e.rawRequest(t, http.MethodPost, "/mcp", initializeBody, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("after 413: %d", resp.StatusCode)
	}
	list := `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`
	if resp, body := e.rawRequest(t, http.MethodPost, "/mcp", list, map[string]string{
		mcpserver.HeaderKeySessionID: sid, mcp.HeaderProtocolVersion: mcp.ProtocolVersion20251125}); resp.StatusCode != http.StatusOK || !strings.Contains(body, "test_whoami") {
		t.Fatalf("session request after 413: %d %s", resp.StatusCode, body)
	}
	stateless := e.client(t, clientOptions{})
	stateless.ok(t, "test_whoami", nil, nil)
}

func TestMissingSessionID(t *testing.T) {
	e := newEnv(t, envOptions{})
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	resp, body := e.rawRequest(t, http.MethodPost, "/mcp", list, map[string]string{mcp.HeaderProtocolVersion: mcp.ProtocolVersion20251125})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, mcpserver.HeaderKeySessionID) {
		t.Fatalf("tools/list without session: %d %s", resp.StatusCode, body)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		if resp, body := e.rawRequest(t, m, "/mcp", "", nil); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s without session: %d %s", m, resp.StatusCode, body)
		}
	}
	// An unknown session id is 404, as the spec says for expired ones.
	resp, _ = e.rawRequest(t, http.MethodPost, "/mcp", list, map[string]string{mcpserver.HeaderKeySessionID: "mcp-session-0123"})
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown session: %d", resp.StatusCode)
	}
}

func TestSessionNotUsableByAnotherPrincipal(t *testing.T) {
	tokens := map[string]string{"token-alice-0123456789": "alice", "token-bob-0123456789": "bob"}
	e := newEnv(t, envOptions{tokens: tokens})
	alice := map[string]string{"Authorization": "Bearer token-alice-0123456789"}
	bob := map[string]string{"Authorization": "Bearer token-bob-0123456789"}
	sid := e.rawSession(t, alice)
	withSession := func(h map[string]string) map[string]string {
		out := map[string]string{mcpserver.HeaderKeySessionID: sid, mcp.HeaderProtocolVersion: mcp.ProtocolVersion20251125}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		resp, body := e.rawRequest(t, m, "/mcp", map[bool]string{true: list}[m == http.MethodPost], withSession(bob))
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("bob %s with alice's session: %d %s", m, resp.StatusCode, body)
		}
	}
	resp, body := e.rawRequest(t, http.MethodPost, "/mcp", list, withSession(alice))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "test_whoami") {
		t.Fatalf("alice after bob's attempts: %d %s", resp.StatusCode, body)
	}
	// Through the registry's Validate too (the path mcp-go takes).
	ids := e.srv.sessions.ResolveSessionIdManager(httptestRequest(withPrincipal(context.Background(), "bob")))
	if _, err := ids.Validate(sid); err == nil {
		t.Fatal("Validate accepted another principal's session")
	}
	if notAllowed, _ := ids.Terminate(sid); !notAllowed {
		t.Fatal("Terminate allowed another principal")
	}
}

func httptestRequest(ctx context.Context) *http.Request {
	r, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1/mcp", nil)
	return r
}

func TestPrincipalsIsolated(t *testing.T) {
	tokens := map[string]string{"token-alice-0123456789": "alice", "token-bob-0123456789": "bob"}
	e := newEnv(t, envOptions{tokens: tokens})
	alice := e.client(t, clientOptions{token: "token-alice-0123456789", workspace: "shared-name"})
	bob := e.client(t, clientOptions{token: "token-bob-0123456789", workspace: "shared-name"})
	var wa, wb whoami
	alice.ok(t, "test_whoami", nil, &wa)
	bob.ok(t, "test_whoami", nil, &wb)
	if wa.Key == wb.Key || wa.SandboxID == wb.SandboxID {
		t.Fatalf("alice %+v and bob %+v share a workspace", wa, wb)
	}

	var ia, ib struct {
		SandboxID string `json:"sandbox_id"`
	}
	alice.ok(t, "workspace_info", nil, &ia)
	bob.ok(t, "workspace_info", nil, &ib)
	if ia.SandboxID == "" || ia.SandboxID == ib.SandboxID {
		t.Fatalf("workspace_info: alice %q, bob %q", ia.SandboxID, ib.SandboxID)
	}

	// Alice's file is not visible to bob under the same workspace name.
	alice.ok(t, "put_files", map[string]any{"files": []map[string]any{{"path": "secret.txt", "content": "alice-secret"}}}, nil)
	var read struct {
		Files []struct {
			ContentIndex int    `json:"content_index"`
			Error        string `json:"error"`
		} `json:"files"`
	}
	got := alice.ok(t, "read_files", map[string]any{"paths": []string{"secret.txt"}}, &read)
	if len(read.Files) != 1 || read.Files[0].ContentIndex != 1 || len(got.Content) != 2 || got.Content[1].(mcp.TextContent).Text != "alice-secret" {
		t.Fatalf("alice reads her file: %+v %s", read, resultText(got))
	}
	res := bob.call(t, "read_files", map[string]any{"paths": []string{"secret.txt"}})
	if strings.Contains(resultText(res), "alice-secret") {
		t.Fatalf("bob read alice's file: %s", resultText(res))
	}
	if !res.IsError {
		read.Files = nil
		decodeStructured(t, res, &read)
		if len(read.Files) != 1 || read.Files[0].Error == "" {
			t.Fatalf("bob's read of a file only alice has: %s", resultText(res))
		}
	}

	// Bob cannot signal alice's background process with her handle.
	var bg struct {
		Process string `json:"process"`
	}
	alice.ok(t, "workspace_exec", map[string]any{"command": "sleep 300", "background": true}, &bg)
	if bg.Process == "" {
		t.Fatal("no process handle")
	}
	res = bob.call(t, "process_signal", map[string]any{"process": bg.Process, "signal": "KILL"})
	if !res.IsError {
		t.Fatalf("bob signalled alice's process: %s", resultText(res))
	}
	var st struct {
		Status string `json:"status"`
	}
	alice.ok(t, "process_output", map[string]any{"process": bg.Process}, &st)
	if st.Status != "running" {
		t.Fatalf("alice's process after bob's signal: %+v", st)
	}
	alice.ok(t, "process_signal", map[string]any{"process": bg.Process, "signal": "KILL"}, nil)
}

func TestDeleteKillsAnonymousSandbox(t *testing.T) {
	e := newEnv(t, envOptions{})
	c, err := e.newClient(clientOptions{legacy: true})
	if err != nil {
		t.Fatal(err)
	}
	var w whoami
	c.ok(t, "test_whoami", nil, &w)
	if !slices.Contains(e.provider.Live(), w.SandboxID) {
		t.Fatalf("sandbox %s not live", w.SandboxID)
	}
	if n := e.srv.sessions.count(); n != 1 {
		t.Fatalf("%d sessions", n)
	}
	sid := c.GetSessionId()
	c.Close() // DELETE
	// Terminate applies the policy before DELETE returns.
	if slices.Contains(e.provider.Live(), w.SandboxID) {
		t.Fatalf("sandbox %s survived DELETE of its session", w.SandboxID)
	}
	if n := e.srv.sessions.count(); n != 0 {
		t.Fatalf("%d sessions after DELETE", n)
	}
	resp, _ := e.rawRequest(t, http.MethodPost, "/mcp", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		map[string]string{mcpserver.HeaderKeySessionID: sid, mcp.HeaderProtocolVersion: mcp.ProtocolVersion20251125})
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("ended session reused: %d", resp.StatusCode)
	}
}

func TestNamedWorkspaceSurvivesSessionEnd(t *testing.T) {
	e := newEnv(t, envOptions{})
	first, err := e.newClient(clientOptions{legacy: true, workspace: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.newClient(clientOptions{legacy: true, workspace: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	var w whoami
	first.ok(t, "test_whoami", nil, &w)
	second.ok(t, "test_whoami", nil, nil)
	first.Close()
	// Still used by the second session: running.
	if st := e.manager.Stats(); st.Workspaces[manage.StateRunning] != 1 {
		t.Fatalf("after the first session ended: %+v", st.Workspaces)
	}
	second.Close()
	if !slices.Contains(e.provider.Live(), w.SandboxID) {
		t.Fatalf("named sandbox %s killed at session end", w.SandboxID)
	}
	if st := e.manager.Stats(); st.Workspaces[manage.StatePaused] != 1 || st.Pauses != 1 {
		t.Fatalf("named workspace not paused once: %+v", st)
	}
	// A new session naming it resumes the same sandbox.
	again := e.client(t, clientOptions{legacy: true, workspace: "keep"})
	var w2 whoami
	again.ok(t, "test_whoami", nil, &w2)
	if w2.SandboxID != w.SandboxID {
		t.Fatalf("named workspace came back as %s, want %s", w2.SandboxID, w.SandboxID)
	}
}

func TestIdleSessionExpires(t *testing.T) {
	e := newEnv(t, envOptions{idleTTL: 500 * time.Millisecond})
	c := e.client(t, clientOptions{legacy: true})
	var w whoami
	c.ok(t, "test_whoami", nil, &w)
	sid := c.GetSessionId()
	waitFor(t, "the idle session's sandbox to be killed", func() bool {
		return !slices.Contains(e.provider.Live(), w.SandboxID)
	})
	if n := e.srv.sessions.count(); n != 0 {
		t.Fatalf("%d sessions after expiry", n)
	}
	// mcp-go's state of the session goes with it.
	waitFor(t, "mcp-go to release the expired session", func() bool { return !e.mcpKnows(sid) })
	_, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if !errors.Is(err, transport.ErrSessionTerminated) {
		t.Fatalf("expired session: %v", err)
	}
}

// expireIdleSession opens a session and waits until it has expired and
// mcp-go has released it. A session idle since before it was opened has
// then been idle for longer than the TTL, and every sweeper that would end
// it has run over it.
func (e *testEnv) expireIdleSession(t testing.TB) {
	t.Helper()
	sid := e.rawSession(t, nil)
	waitFor(t, "a fresh idle session to expire", func() bool {
		_, known := e.srv.sessions.owner(sid)
		return !known && !e.mcpKnows(sid)
	})
}

// TestBusySessionDoesNotExpire, with a real short idle TTL: a session whose
// call sent progress and then outlasts the TTL gets its result, and a
// session with an open GET stream keeps receiving notifications. Each ends
// once idle, and mcp-go's state of it is released then.
func TestBusySessionDoesNotExpire(t *testing.T) {
	e := newEnv(t, envOptions{idleTTL: 300 * time.Millisecond})
	busy := e.client(t, clientOptions{legacy: true})
	var w whoami
	busy.ok(t, "test_whoami", nil, &w)
	busySID := busy.GetSessionId()
	listenSID := e.rawSession(t, nil)
	e.initialized(t, listenSID)
	events, closeStream := e.listen(t, listenSID)

	type result struct {
		text string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		res, err := busy.callErr(context.Background(), "test_block", nil, "long")
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{text: resultText(res)}
	}()
	recv(t, e.blocks.started, "the long call to start")
	waitFor(t, "the long call's progress", func() bool {
		return len(progressValues(t, busy.progress(), "long")) == 1
	})
	// Twice: the second one expires in a later sweep than the first, so the
	// sweep that ended the first (and would have ended the two busy
	// sessions, idle by arrival time for longer) is over.
	e.expireIdleSession(t)
	e.expireIdleSession(t)

	for _, sid := range []string{busySID, listenSID} {
		if _, ok := e.srv.sessions.owner(sid); !ok || !e.mcpKnows(sid) {
			t.Fatalf("busy session %s was ended as idle (registry %v, mcp-go %v)", sid, ok, e.mcpKnows(sid))
		}
	}
	if err := e.srv.MCP().SendNotificationToSpecificClient(listenSID, "notifications/message",
		map[string]any{"level": "info", "data": "still listening"}); err != nil {
		t.Fatalf("notifying the listening session: %v", err)
	}
	if got := recv(t, events, "the notification on the GET stream"); !strings.Contains(got, "still listening") {
		t.Fatalf("GET stream carried %s", got)
	}
	e.blocks.release <- struct{}{}
	if got := recv(t, done, "the long call's result"); got.err != nil || got.text != "released" {
		t.Fatalf("the long call: %q, %v", got.text, got.err)
	}
	if !slices.Contains(e.provider.Live(), w.SandboxID) {
		t.Fatal("the busy session's sandbox was killed")
	}

	// Idle now: both end, their sandbox and mcp-go's state with them.
	closeStream()
	waitFor(t, "the sessions to end once idle", func() bool {
		for _, sid := range []string{busySID, listenSID} {
			if _, ok := e.srv.sessions.owner(sid); ok || e.mcpKnows(sid) {
				return false
			}
		}
		return !slices.Contains(e.provider.Live(), w.SandboxID)
	})
}

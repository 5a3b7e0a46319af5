package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// The budget admits a principal up to half of it when there are several,
// whatever the others hold, and the whole budget to a lone principal.
func TestMemoryBudgetShares(t *testing.T) {
	b := newMemoryBudget(100, 2)
	ctx := context.Background()
	releaseA, err := b.acquire(ctx, "alice", 50, false)
	if err != nil {
		t.Fatalf("alice's half: %v", err)
	}
	if _, err := b.acquire(ctx, "alice", 1, false); err == nil || err.(*budgetError).status != http.StatusServiceUnavailable {
		t.Fatalf("alice past her half: %v; want 503", err)
	}
	releaseB, err := b.acquire(ctx, "bob", 50, false)
	if err != nil {
		t.Fatalf("bob's half while alice holds hers: %v", err)
	}
	if _, err := b.acquire(ctx, "bob", 60, false); err == nil || err.(*budgetError).status != http.StatusRequestEntityTooLarge {
		t.Fatalf("bob asking for more than a share: %v; want 413", err)
	}
	releaseA()
	releaseA() // a second release gives nothing back twice
	if used, _ := b.inUse(); used != 50 {
		t.Fatalf("in use after alice's release: %d; want 50", used)
	}
	releaseB()

	lone := newMemoryBudget(100, 1)
	release, err := lone.acquire(ctx, "local", 100, false)
	if err != nil {
		t.Fatalf("a lone principal's whole budget: %v", err)
	}
	if _, err := lone.acquire(ctx, "local", 101, false); err == nil || !strings.Contains(err.Error(), "whole request memory budget") {
		t.Fatalf("more than the budget: %v; want 413 naming the budget", err)
	}
	release()
}

// A waiting request gets the room released while it waits.
func TestMemoryBudgetWaitsForRelease(t *testing.T) {
	b := newMemoryBudget(100, 1)
	b.wait = failTimeout
	release, err := b.acquire(context.Background(), "p", 80, false)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 1)
	b.waiting = func() { waiting <- struct{}{} }
	got := make(chan error, 1)
	go func() {
		r, err := b.acquire(context.Background(), "p", 80, true)
		if err == nil {
			r()
		}
		got <- err
	}()
	recv(t, waiting, "the second acquire to wait")
	release() // while the other waits: it gets the room
	if err := recv(t, got, "the waiting acquire"); err != nil {
		t.Fatalf("acquire after a release: %v", err)
	}
}

// upload is a tools/call POST whose body the test sends when it wants to:
// Content-Length is announced at once, the bytes follow on send.
type upload struct {
	pw   *io.PipeWriter
	done chan struct{} // closed by finish: send the rest
	resp chan uploadResult
}

type uploadResult struct {
	status  int
	header  http.Header
	body    string
	err     error
	pending bool // the client had not sent the whole body when answered
}

// startUpload starts a put_files of one file of size bytes in session sid,
// sending the first sent bytes of its body; the rest waits for finish.
// chunked sends it without a Content-Length.
func (e *testEnv) startUpload(t *testing.T, bs budgetSess, path string, size int, sent int, chunked bool) *upload {
	t.Helper()
	args, err := json.Marshal(map[string]any{"files": []map[string]any{{"path": path, "content": strings.Repeat("x", size)}}})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"put_files","arguments":` + string(args) + `}}`)
	pr, pw := io.Pipe()
	u := &upload{pw: pw, done: make(chan struct{}), resp: make(chan uploadResult, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), failTimeout)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/mcp", pr)
	if err != nil {
		t.Fatal(err)
	}
	if !chunked {
		req.ContentLength = int64(len(body))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+bs.token)
	req.Header.Set(WorkspaceHeader, bs.workspace)
	req.Header.Set(mcpserver.HeaderKeySessionID, bs.sid)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20251125)
	go func() {
		if _, err := pw.Write(body[:sent]); err != nil {
			return
		}
		<-u.done
		if _, err := pw.Write(body[sent:]); err == nil {
			_ = pw.Close()
		}
	}()
	go func() {
		resp, err := (&http.Client{Transport: e.rt}).Do(req)
		res := uploadResult{err: err}
		select {
		case <-u.done:
		default:
			res.pending = true
		}
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			res.status, res.header, res.body = resp.StatusCode, resp.Header, string(b)
		}
		u.resp <- res
	}()
	return u
}

// finish sends the rest of the body.
func (u *upload) finish() { close(u.done) }

// abandon stops sending: the client gives up on the body.
func (u *upload) abandon() { _ = u.pw.CloseWithError(io.ErrUnexpectedEOF) }

// waitInUse waits until the server's budget has at least n bytes reserved.
func (e *testEnv) waitInUse(t *testing.T, n int64) {
	t.Helper()
	deadline := time.After(failTimeout)
	for {
		used, changed := e.srv.budget.inUse()
		if used >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the budget never held %d bytes (holds %d)", n, used)
		}
	}
}

// budgetSess is a raw session and the workspace its calls use.
type budgetSess struct{ token, sid, workspace string }

// budgetSession opens a raw session of token whose calls use workspace ws.
func (e *testEnv) budgetSession(t *testing.T, token, ws string) budgetSess {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + token, WorkspaceHeader: ws}
	sid := e.rawSession(t, h)
	h[mcpserver.HeaderKeySessionID], h[mcp.HeaderProtocolVersion] = sid, mcp.ProtocolVersion20251125
	resp, body := e.rawRequest(t, http.MethodPost, "/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s", resp.StatusCode, body)
	}
	return budgetSess{token: token, sid: sid, workspace: ws}
}

// refusedEarly fails the test unless r is the budget's refusal with status,
// answered while the client was still sending the body.
func refusedEarly(t *testing.T, what string, r uploadResult, status int) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	if r.status != status || !strings.Contains(r.body, "--max-request-memory") {
		t.Fatalf("%s: %d %s; want %d naming --max-request-memory", what, r.status, r.body, status)
	}
	if status == http.StatusServiceUnavailable && r.header.Get("Retry-After") == "" {
		t.Errorf("%s: 503 without Retry-After", what)
	}
	if !r.pending {
		t.Errorf("%s: answered only after the whole body was sent; want the refusal before the body is read", what)
	}
}

const (
	budgetTest = 4 << 20 // the test servers' --max-request-memory
	uploadSize = 1200 << 10
)

// Concurrent large put_files of two principals under a small budget: what
// fits runs, what does not is refused with 503 before its body is read
// (the client is still sending), nothing of a refused call is written, and
// both principals' small calls still work. A body larger than a share gets
// 413 at once.
func TestMemoryBudgetConcurrentUploads(t *testing.T) {
	e := newEnv(t, envOptions{tokens: map[string]string{"token-a": "alice", "token-b": "bob"}, maxBody: 8 << 20, maxRequestMemory: budgetTest})
	e.srv.budget.wait = 0 // refuse at once: these tests do not wait for releases
	aliceSid := e.budgetSession(t, "token-a", "wa")
	bobSid := e.budgetSession(t, "token-b", "wb")

	// Each principal's share is 2 MiB: one upload each fits, a second of
	// either does not (alice: her share; bob: his share).
	a1 := e.startUpload(t, aliceSid, "a1.txt", uploadSize, 1000, false)
	e.waitInUse(t, uploadSize)
	b1 := e.startUpload(t, bobSid, "b1.txt", uploadSize, 1000, false)
	e.waitInUse(t, 2*uploadSize)
	a2 := e.startUpload(t, aliceSid, "a2.txt", uploadSize, 1000, false)
	refusedEarly(t, "alice's second upload", recv(t, a2.resp, "alice's second upload"), http.StatusServiceUnavailable)
	a2.abandon()
	b2 := e.startUpload(t, bobSid, "b2.txt", uploadSize, 1000, true)
	b2.finish() // chunked: refused as its bytes arrive
	r := recv(t, b2.resp, "bob's chunked second upload")
	if r.err != nil || r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "--max-request-memory") {
		t.Fatalf("bob's chunked second upload: %d %s %v; want 503 naming --max-request-memory", r.status, r.body, r.err)
	}
	huge := e.startUpload(t, aliceSid, "huge.txt", 3<<20, 1000, false)
	refusedEarly(t, "a body larger than a share", recv(t, huge.resp, "the huge upload"), http.StatusRequestEntityTooLarge)
	huge.abandon()

	// Small calls of both still fit beside the uploads in flight.
	alice := e.client(t, clientOptions{legacy: true, token: "token-a", workspace: "wa"})
	bob := e.client(t, clientOptions{legacy: true, token: "token-b", workspace: "wb"})
	for _, c := range []*mcpClient{alice, bob} {
		c.ok(t, "workspace_exec", map[string]any{"command": "echo small"}, nil)
	}
	// mcp-go's client hands the refusal's JSON-RPC error to the caller.
	_, err := alice.callErr(context.Background(), "put_files", map[string]any{"files": []map[string]any{{"path": "a3.txt", "content": strings.Repeat("x", uploadSize)}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "--max-request-memory") {
		t.Errorf("alice's client past her share: %v; want an error naming --max-request-memory", err)
	}

	a1.finish()
	b1.finish()
	for name, u := range map[string]*upload{"alice's first upload": a1, "bob's first upload": b1} {
		r := recv(t, u.resp, name)
		if r.err != nil || r.status != http.StatusOK || strings.Contains(r.body, `"isError":true`) {
			t.Fatalf("%s: %d %.300s %v; want it written", name, r.status, r.body, r.err)
		}
	}
	for c, want := range map[*mcpClient]string{alice: "a1.txt", bob: "b1.txt"} {
		var out struct {
			Stdout string `json:"stdout"`
		}
		c.ok(t, "workspace_exec", map[string]any{"command": "ls -A | grep -vx .sandbox-mcp; wc -c < " + want}, &out)
		if got := strings.Fields(out.Stdout); len(got) != 2 || got[0] != want || got[1] != fmt.Sprint(uploadSize) {
			t.Errorf("workspace files: %q; want only %s of %d bytes (no temporaries of the refused calls)", out.Stdout, want, uploadSize)
		}
	}
	if used, _ := e.srv.budget.inUse(); used != 0 {
		t.Errorf("budget in use after every request ended: %d; want 0", used)
	}
	_, metrics := e.rawRequest(t, http.MethodGet, "/metrics", "", map[string]string{"Authorization": "Bearer token-a"})
	if !strings.Contains(metrics, "sandbox_mcp_request_memory_refused_total 3\n") {
		t.Errorf("/metrics: want sandbox_mcp_request_memory_refused_total 3 in:\n%s", metrics)
	}
}

// An attack: one principal opens many slow large uploads (it never sends
// their bodies). It holds at most its half of the budget, the rest is
// refused, and another principal's small calls and even a large upload
// still run, however long the slow uploads stay open.
func TestMemoryBudgetSlowUploadsDoNotStarveOthers(t *testing.T) {
	e := newEnv(t, envOptions{tokens: map[string]string{"token-a": "mallory", "token-b": "bob"}, maxBody: 8 << 20, maxRequestMemory: budgetTest})
	e.srv.budget.wait = 0
	mallorySid := e.budgetSession(t, "token-a", "wm")
	const slowSize = 600 << 10
	var held []*upload
	refused := 0
	for i := range 8 {
		u := e.startUpload(t, mallorySid, fmt.Sprintf("slow%d.txt", i), slowSize, 10, false)
		e.waitOrRefused(t, u, int64(len(held)+1)*int64(slowSize), &held, &refused)
	}
	if len(held) == 0 || refused == 0 || int64(len(held)*slowSize) > budgetTest/2 {
		t.Fatalf("mallory holds %d uploads, %d refused; want her held to her half (%d bytes)", len(held), refused, budgetTest/2)
	}
	bob := e.client(t, clientOptions{legacy: true, token: "token-b", workspace: "wb"})
	for range 5 {
		bob.ok(t, "workspace_exec", map[string]any{"command": "true"}, nil)
	}
	bob.ok(t, "put_files", map[string]any{"files": []map[string]any{{"path": "big.txt", "content": strings.Repeat("y", uploadSize)}}}, nil)
	for _, u := range held {
		u.abandon()
		<-u.resp
	}
}

// waitOrRefused waits for upload u to be either admitted (the budget holds
// want bytes) or refused.
func (e *testEnv) waitOrRefused(t *testing.T, u *upload, want int64, held *[]*upload, refused *int) {
	t.Helper()
	deadline := time.After(failTimeout)
	for {
		used, changed := e.srv.budget.inUse()
		if used >= want {
			*held = append(*held, u)
			return
		}
		select {
		case r := <-u.resp:
			refusedEarly(t, "a slow upload past the share", r, http.StatusServiceUnavailable)
			u.abandon()
			*refused++
			return
		case <-changed:
		case <-deadline:
			t.Fatal("an upload was neither admitted nor refused")
		}
	}
}

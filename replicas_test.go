//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2b"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
	"github.com/sandbox-mcp/sandbox-mcp/manage/redisstore/redistest"
)

// replicaPrincipal is the principal of the token every replica shares.
const replicaPrincipal = "alice"

// replicaCluster is what several `serve --http` replicas share: one Redis,
// one management server (manage serve) and one tokens file.
type replicaCluster struct {
	redis *redistest.Server
	api   *manageServer
	token string
	dir   string
}

func newReplicaCluster(t *testing.T) *replicaCluster {
	t.Helper()
	c := &replicaCluster{redis: redistest.Start(t), api: startManageServe(t, manageServeConfig{}), dir: envdtest.ShortTempDir(t)}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	c.token = hex.EncodeToString(b)
	if err := os.WriteFile(filepath.Join(c.dir, "tokens.txt"), []byte(c.token+" "+replicaPrincipal+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// workspaceKey is the store key of the named workspace name of the shared
// principal (the same on every replica).
func workspaceKey(name string) string { return "http:" + replicaPrincipal + ":ws:" + name }

// sandboxesOf lists the management server's sandboxes made for key.
func (c *replicaCluster) sandboxesOf(t *testing.T, key string) []string {
	t.Helper()
	all, err := c.api.Client(t).List(t.Context(), e2b.ListOptions{Metadata: map[string]string{e2b.MetaKey: key}})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(all))
	for _, sb := range all {
		ids = append(ids, sb.SandboxID)
	}
	return ids
}

// replica is one `serve --http` process of a cluster, its own state
// directory, its stderr kept and watched for the test hook's line.
type replica struct {
	name string
	url  string
	cmd  *exec.Cmd

	mu      sync.Mutex
	stderr  strings.Builder
	holding chan struct{} // closed when it logs that it holds a creation lock
	exited  chan struct{} // closed once its stderr ends
	stopped bool
}

// start starts a replica with extra flags and env (KEY=VALUE) and waits
// for its ready line; it is stopped with SIGTERM when the test ends.
func (c *replicaCluster) start(t *testing.T, name string, env []string, extra ...string) *replica {
	t.Helper()
	bin := envdtest.Binary(t)
	args := append([]string{"serve", "--http", "127.0.0.1:0", "--ready-fd", "3", "--log-level", "warn",
		"--state-dir", filepath.Join(c.dir, name), "--auth-tokens-file", filepath.Join(c.dir, "tokens.txt"),
		"--store", c.redis.URL(), "--redis-lock-expiry", "1s", "--max-concurrent-calls", "20"}, c.api.ServeFlags()...)
	args = append(args, extra...)
	r := &replica{name: name, holding: make(chan struct{}), exited: make(chan struct{})}
	r.cmd = exec.Command(bin, args...)
	r.cmd.Env = append(os.Environ(), env...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.ExtraFiles = []*os.File{pw}
	errPipe, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	go r.watch(errPipe)
	line, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if err != nil || !strings.HasPrefix(line, "ready http://") {
		_ = r.cmd.Process.Kill()
		<-r.exited
		_ = r.cmd.Wait()
		t.Fatalf("replica %s did not become ready (%q, %v):\n%s", name, line, err, r.Stderr())
	}
	r.url = strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	t.Cleanup(func() { r.stop(t) })
	return r
}

// watch keeps the replica's stderr and closes holding at the hook's line.
func (r *replica) watch(rd io.Reader) {
	defer close(r.exited)
	sc := bufio.NewScanner(rd)
	once := sync.Once{}
	for sc.Scan() {
		r.mu.Lock()
		r.stderr.WriteString(sc.Text() + "\n")
		r.mu.Unlock()
		if strings.Contains(sc.Text(), "test hook: holding the creation lock") {
			once.Do(func() { close(r.holding) })
		}
	}
}

// Stderr is what the replica logged so far.
func (r *replica) Stderr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// kill ends the replica with SIGKILL: it releases nothing.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
	_ = r.cmd.Wait()
}

// stop ends the replica with SIGTERM and expects a clean exit (once).
func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	done := r.stopped
	r.stopped = true
	r.mu.Unlock()
	if done {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	<-r.exited
	if err := r.cmd.Wait(); err != nil {
		t.Errorf("replica %s did not stop cleanly: %v\n%s", r.name, err, r.Stderr())
	}
}

// client is a stateless MCP client (revision 2026-07-28) of r that picks
// the named workspace with Sandbox-Workspace, as a client behind a load
// balancer without affinity would.
func (r *replica) client(t *testing.T, token, workspace string) *mcpclient.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(r.url, transport.WithHTTPHeaders(map[string]string{
		"Authorization": "Bearer " + token, "Sandbox-Workspace": workspace,
	}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "replicas-test", Version: "0"}
	if _, err := c.Initialize(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	return c
}

// sandboxInfo is what the replicas test reads of workspace_info.
type sandboxInfo struct {
	SandboxID  string `json:"sandbox_id"`
	Generation int64  `json:"generation"`
}

// infoFrom decodes workspace_info's structuredContent (without failing the
// test, for goroutines).
func infoFrom(res *mcp.CallToolResult) (sandboxInfo, error) {
	var info sandboxInfo
	raw, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(raw, &info)
	}
	return info, err
}

func infoOf(t *testing.T, c *mcpclient.Client) sandboxInfo {
	t.Helper()
	res := callTool(t, t.Context(), c, "workspace_info", map[string]any{})
	mustOK(t, "workspace_info", res)
	var info sandboxInfo
	structuredOf(t, res, &info)
	return info
}

// TestReplicasShareWorkspaces: two `serve --http` replicas sharing one real
// redis-server and one manage serve serve one sandbox per named workspace,
// whichever replica each stateless call reaches: calls alternating between
// them see the same files and the same sandbox; 20 concurrent first calls
// spread over both make exactly one sandbox.
func TestReplicasShareWorkspaces(t *testing.T) {
	cl := newReplicaCluster(t)
	a, b := cl.start(t, "a", nil), cl.start(t, "b", nil)

	t.Run("alternating", func(t *testing.T) {
		ca, cb := a.client(t, cl.token, "alt"), b.client(t, cl.token, "alt")
		ctx := t.Context()
		mustOK(t, "put_files on A", callTool(t, ctx, ca, "put_files", map[string]any{
			"files": []any{map[string]any{"path": "notes/a.txt", "content": "written on A\n"}},
		}))
		if text := mustOK(t, "read_files on B", callTool(t, ctx, cb, "read_files", map[string]any{"paths": []any{"notes/a.txt"}})); !strings.Contains(text, "written on A") {
			t.Fatalf("B does not see A's file: %s", text)
		}
		mustOK(t, "workspace_exec on B", callTool(t, ctx, cb, "workspace_exec", map[string]any{"command": "echo from B >> notes/a.txt"}))
		var exec struct {
			Stdout string `json:"stdout"`
		}
		res := callTool(t, ctx, ca, "workspace_exec", map[string]any{"command": "cat notes/a.txt"})
		mustOK(t, "workspace_exec on A", res)
		structuredOf(t, res, &exec)
		if exec.Stdout != "written on A\nfrom B\n" {
			t.Fatalf("A reads %q; want both replicas' writes", exec.Stdout)
		}
		ia, ib := infoOf(t, ca), infoOf(t, cb)
		if ia != ib || ia.Generation != 1 || ia.SandboxID == "" {
			t.Fatalf("workspace_info: A %+v, B %+v; want one sandbox, generation 1", ia, ib)
		}
		if ids := cl.sandboxesOf(t, workspaceKey("alt")); len(ids) != 1 || ids[0] != ia.SandboxID {
			t.Fatalf("manage serve has sandboxes %v for the workspace; want only %s", ids, ia.SandboxID)
		}
	})

	t.Run("concurrent first calls", func(t *testing.T) {
		const calls = 20
		clients := make([]*mcpclient.Client, calls)
		for i := range clients {
			clients[i] = []*replica{a, b}[i%2].client(t, cl.token, "burst")
		}
		ids := make([]string, calls)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() {
				req := mcp.CallToolRequest{}
				req.Params.Name = "workspace_info"
				res, err := c.CallTool(t.Context(), req)
				if err != nil || res.IsError {
					t.Errorf("call %d: %v %v", i, err, res)
					return
				}
				info, err := infoFrom(res)
				if err != nil {
					t.Error(err)
				}
				ids[i] = fmt.Sprintf("%s/%d", info.SandboxID, info.Generation)
			})
		}
		wg.Wait()
		for i := range ids {
			if ids[i] != ids[0] {
				t.Fatalf("calls saw different sandboxes: %v", ids)
			}
		}
		if got := cl.sandboxesOf(t, workspaceKey("burst")); len(got) != 1 {
			t.Fatalf("manage serve made %d sandboxes (%v) for 20 concurrent first calls; want 1", len(got), got)
		}
	})
}

// TestReplicaKilledHoldingCreationLock: the replica that takes a
// workspace's creation lock is killed (SIGKILL) before it makes the
// sandbox. The other replica's calls, waiting for that lock, proceed once it
// expires (--redis-lock-expiry 1s) and make the one sandbox. The test hook
// SANDBOX_MCP_TEST_HOLD_CREATION_LOCK (testhook.go) makes the first replica
// to take the lock hold it until killed, so which replica dies mid-creation
// is known, not raced.
func TestReplicaKilledHoldingCreationLock(t *testing.T) {
	cl := newReplicaCluster(t)
	hook := []string{testHoldLockEnv + "=" + filepath.Join(cl.dir, "hold-lock")}
	a, b := cl.start(t, "a", hook), cl.start(t, "b", hook)
	const perReplica = 3
	clients := map[*replica][]*mcpclient.Client{}
	for _, r := range []*replica{a, b} {
		for range perReplica {
			clients[r] = append(clients[r], r.client(t, cl.token, "crash"))
		}
	}
	type outcome struct {
		info sandboxInfo
		err  error
	}
	results := map[*replica]chan outcome{a: make(chan outcome, perReplica), b: make(chan outcome, perReplica)}
	for r, cs := range clients {
		for _, c := range cs {
			go func() {
				req := mcp.CallToolRequest{}
				req.Params.Name = "workspace_info"
				res, err := c.CallTool(context.Background(), req)
				var o outcome
				switch {
				case err != nil:
					o.err = err
				case res.IsError:
					o.err = fmt.Errorf("error result: %s", textOf(res))
				default:
					o.info, o.err = infoFrom(res)
				}
				results[r] <- o
			}()
		}
	}
	var holder, other *replica
	select {
	case <-a.holding:
		holder, other = a, b
	case <-b.holding:
		holder, other = b, a
	case <-t.Context().Done():
		t.Fatal("no replica took the creation lock")
	}
	holder.kill(t)
	for range perReplica {
		if o := <-results[holder]; o.err == nil {
			t.Errorf("a call on the killed replica %s succeeded: %+v", holder.name, o.info)
		}
	}
	var first sandboxInfo
	for i := range perReplica {
		o := <-results[other]
		if o.err != nil {
			t.Fatalf("a call on replica %s, which outlived the lock holder: %v\n%s", other.name, o.err, other.Stderr())
		}
		if i == 0 {
			first = o.info
		}
		if o.info != first || o.info.Generation != 1 {
			t.Fatalf("calls on replica %s saw %+v and %+v; want one sandbox, generation 1", other.name, first, o.info)
		}
	}
	if ids := cl.sandboxesOf(t, workspaceKey("crash")); len(ids) != 1 || ids[0] != first.SandboxID {
		t.Fatalf("manage serve has sandboxes %v for the workspace; want only %s", ids, first.SandboxID)
	}
	if !strings.Contains(holder.Stderr(), workspaceKey("crash")) {
		t.Errorf("the killed replica's hook line does not name the workspace:\n%s", holder.Stderr())
	}
}

// TestReplicasIdlePause: with --idle-pause 2s on both replicas, a replica
// that served the workspace and then saw no call leaves the sandbox running
// while the other replica runs a call longer than the idle pause on it
// (that replica records its activity in the store); the call finishes, and
// the sandbox is running when it does.
func TestReplicasIdlePause(t *testing.T) {
	cl := newReplicaCluster(t)
	a, b := cl.start(t, "a", nil, "--idle-pause", "2s"), cl.start(t, "b", nil, "--idle-pause", "2s")
	ca, cb := a.client(t, cl.token, "idle"), b.client(t, cl.token, "idle")
	ctx := t.Context()
	mustOK(t, "workspace_exec on A", callTool(t, ctx, ca, "workspace_exec", map[string]any{"command": "echo a > a.txt"}))
	// A's idle clock runs out in the middle of this call on B.
	res := callTool(t, ctx, cb, "workspace_exec", map[string]any{"command": "sleep 4; cat a.txt; echo done on B", "timeout_sec": 60})
	var exec struct {
		Stdout string `json:"stdout"`
	}
	mustOK(t, "a call on B longer than A's idle pause", res)
	structuredOf(t, res, &exec)
	if exec.Stdout != "a\ndone on B\n" {
		t.Fatalf("B's call: %q", exec.Stdout)
	}
	info := infoOf(t, cb)
	sb, err := cl.api.Client(t).Get(ctx, info.SandboxID)
	if err != nil || sb.State != e2bapi.StateRunning {
		t.Fatalf("the sandbox after B's call: %+v, %v; want running", sb, err)
	}
	if ia := infoOf(t, ca); ia != info {
		t.Fatalf("A sees %+v, B %+v; want one sandbox", ia, info)
	}
}

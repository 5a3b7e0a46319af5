//go:build linux

package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

// sharedServer is one `sandbox-mcp serve` stdio process on a state
// directory other servers share.
type sharedServer struct {
	t   *testing.T
	c   *mcpclient.Client
	cmd *exec.Cmd
}

// startShared starts a stdio server on state with extra flags and
// initializes its session.
func startShared(t *testing.T, state string, extra ...string) *sharedServer {
	t.Helper()
	s := &sharedServer{t: t}
	args := append([]string{"serve", "--state-dir", state, "--log-level", "warn"}, extra...)
	capture := func(ctx context.Context, command string, env []string, args []string) (*exec.Cmd, error) {
		cmd := exec.CommandContext(ctx, command, args...)
		cmd.Env = append(os.Environ(), env...)
		s.cmd = cmd
		return cmd, nil
	}
	c, err := mcpclient.NewStdioMCPClientWithOptions(envdtest.Binary(t), nil, args, transport.WithCommandFunc(capture))
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	t.Cleanup(func() { c.Close() })
	initialize(t, context.Background(), c)
	return s
}

// exec runs command with workspace_exec and returns the result, failing the
// test on a tool error.
func (s *sharedServer) exec(command string, background bool) *mcp.CallToolResult {
	s.t.Helper()
	res := callTool(s.t, context.Background(), s.c, "workspace_exec", map[string]any{"command": command, "background": background})
	if res.IsError {
		s.t.Fatalf("workspace_exec %q: %s", command, textOf(res))
	}
	return res
}

// sleeperRunning reports whether `sleep 300` runs in the sandbox, as
// process_list sees it (a tracked background process or another one).
func (s *sharedServer) sleeperRunning() bool {
	s.t.Helper()
	res := callTool(s.t, context.Background(), s.c, "process_list", map[string]any{})
	if res.IsError {
		s.t.Fatalf("process_list: %s", textOf(res))
	}
	var out struct {
		Processes []struct {
			Command string `json:"command"`
			Status  string `json:"status"`
		} `json:"processes"`
		Others []struct {
			Command string `json:"command"`
		} `json:"others"`
	}
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &out); err != nil {
		s.t.Fatal(err)
	}
	for _, p := range out.Processes {
		if strings.Contains(p.Command, "sleep 300") && p.Status == "running" {
			return true
		}
	}
	for _, p := range out.Others {
		if strings.Contains(p.Command, "sleep 300") {
			return true
		}
	}
	return false
}

// exit closes the server's stdin and waits for it to end, as a client that
// quits does.
func (s *sharedServer) exit() {
	s.t.Helper()
	if err := s.c.Close(); err != nil {
		s.t.Logf("close: %v", err)
	}
}

// kill9 kills the server with SIGKILL and reaps it.
func (s *sharedServer) kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	_ = s.c.Close()
}

// rejoinPaused starts a server on the workspace "shared" after the last
// one left it and runs a command there, which must say the sandbox was
// paused while idle and resumed; it returns the new server.
func rejoinPaused(t *testing.T, state string) *sharedServer {
	t.Helper()
	s := startShared(t, state, "--workspace", "shared")
	if got := textOf(s.exec("true", false)); !strings.Contains(got, "paused while idle and was resumed") {
		t.Fatalf("the last server's exit should have paused the sandbox; got %q", got)
	}
	return s
}

// sharedState is a fresh state directory for servers to share. Named
// workspaces' sandboxes outlive their servers: once the test is done (its
// servers gone), the ones left are killed.
func sharedState(t *testing.T) string {
	state := filepath.Join(envdtest.ShortTempDir(t), "state")
	t.Cleanup(func() { killSandboxes(t, state) })
	return state
}

// killSandboxes kills every local sandbox in state.
func killSandboxes(t testing.TB, state string) {
	if _, err := os.Stat(filepath.Join(state, "sandboxes")); err != nil {
		return
	}
	ctx := context.Background()
	p, err := local.New(ctx, local.Config{StateDir: state, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Errorf("cleaning up: %v", err)
		return
	}
	defer p.Close(ctx)
	sbs, err := p.List(ctx)
	if err != nil {
		t.Errorf("cleaning up: %v", err)
		return
	}
	for _, sb := range sbs {
		if err := p.Kill(ctx, sb.ID); err != nil {
			t.Errorf("cleaning up sandbox %s: %v", sb.ID, err)
		}
	}
}

// TestSharedWorkspaceOutlivesFirstServer: two servers on one named
// workspace; the one that made the sandbox exits while the other has a
// background process there. The process goes on and the other's next
// command runs; once the last server exits the sandbox is paused (the next
// server finds it resumed, the process still there).
func TestSharedWorkspaceOutlivesFirstServer(t *testing.T) {
	state := sharedState(t)
	a := startShared(t, state, "--workspace", "shared")
	a.exec("echo a > a.txt", false)
	b := startShared(t, state, "--workspace", "shared")
	b.exec("sleep 300", true)
	if !b.sleeperRunning() {
		t.Fatal("process_list does not show the background sleep")
	}
	a.exit()
	if !b.sleeperRunning() {
		t.Fatal("the background sleep of the second server died when the first exited")
	}
	if got := textOf(b.exec("cat a.txt; echo ran", false)); !strings.Contains(got, "ran") || !strings.Contains(got, "a") {
		t.Fatalf("the second server's command after the first exited: %q", got)
	}
	b.exit()
	c := rejoinPaused(t, state)
	if !c.sleeperRunning() {
		t.Fatal("the background sleep did not survive the pause")
	}
}

// TestSharedWorkspaceHolderKilled: the server that made the sandbox is
// killed with SIGKILL while another uses it; the other is unaffected, and
// its own exit still pauses the sandbox.
func TestSharedWorkspaceHolderKilled(t *testing.T) {
	state := sharedState(t)
	a := startShared(t, state, "--workspace", "shared")
	a.exec("true", false)
	b := startShared(t, state, "--workspace", "shared")
	b.exec("sleep 300", true)
	a.kill9()
	if !b.sleeperRunning() {
		t.Fatal("the background sleep died with the killed server")
	}
	if got := textOf(b.exec("echo ran", false)); !strings.Contains(got, "ran") {
		t.Fatalf("the second server's command after the first was killed: %q", got)
	}
	b.exit()
	rejoinPaused(t, state)
}

// TestSharedWorkspaceThreeServers: three servers join one named workspace
// and leave in an order other than the one they came in; the sandbox and
// its background process live until the last has left.
func TestSharedWorkspaceThreeServers(t *testing.T) {
	state := sharedState(t)
	a := startShared(t, state, "--workspace", "shared")
	a.exec("true", false)
	b := startShared(t, state, "--workspace", "shared")
	c := startShared(t, state, "--workspace", "shared")
	c.exec("sleep 300", true)
	b.exit()
	if !a.sleeperRunning() {
		t.Fatal("the sleep died when the second server left")
	}
	a.exit()
	if !c.sleeperRunning() {
		t.Fatal("the sleep died when the first server left")
	}
	c.exec("true", false)
	d := startShared(t, state, "--workspace", "shared")
	if got := textOf(d.exec("true", false)); strings.Contains(got, "resumed") || strings.Contains(got, "restarted") {
		t.Fatalf("a server joining while another holds the sandbox should find it running; got %q", got)
	}
	c.exit()
	if !d.sleeperRunning() {
		t.Fatal("the sleep died when the third server left")
	}
	d.exit()
	rejoinPaused(t, state)
}

// TestAnonymousWorkspaceEndsWithSession: a server without --workspace has a
// sandbox of its own, killed (its directory removed) when its session ends,
// even while another server runs on the same state directory.
func TestAnonymousWorkspaceEndsWithSession(t *testing.T) {
	state := sharedState(t)
	other := startShared(t, state, "--workspace", "shared")
	other.exec("true", false)
	before := sandboxDirs(t, state)
	anon := startShared(t, state)
	anon.exec("sleep 300", true)
	if got := sandboxDirs(t, state); len(got) != len(before)+1 {
		t.Fatalf("sandboxes with the anonymous one: %v (before: %v)", got, before)
	}
	anon.exit()
	if got := sandboxDirs(t, state); len(got) != len(before) {
		t.Fatalf("sandboxes after the anonymous session ended: %v, want %v", got, before)
	}
	if got := textOf(other.exec("echo ran", false)); !strings.Contains(got, "ran") {
		t.Fatalf("the named workspace after the anonymous session ended: %q", got)
	}
}

// sandboxDirs lists the local provider's sandbox directories under state.
func sandboxDirs(t *testing.T, state string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(state, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

//go:build linux

package local

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// TestSharedStateDir runs two Providers on one state directory, as two
// sandbox-mcp processes would (flocks belong to open files, so two Providers
// of one process exclude each other just the same).
func TestSharedStateDir(t *testing.T) {
	needBinary(t)
	stateDir := newStateDir(t)
	a := needBwrap(t, Config{StateDir: stateDir})
	b := newProvider(t, Config{StateDir: stateDir, Isolation: IsolationBwrap})
	sa := create(t, a, manage.SandboxConfig{Env: map[string]string{"OWNER": "a"}})
	sb := create(t, b, manage.SandboxConfig{})
	shOK(t, connectTo(t, a, sa.ID), "echo from-a > /workspace/file")

	// A's sandbox seen from B: running, reachable, not B's.
	info, err := b.Info(testCtx(t), sa.ID)
	if err != nil || info.State != manage.StateRunning || info.Isolation != IsolationBwrap ||
		info.Detail != fmt.Sprintf("run by sandbox-mcp process %d", os.Getpid()) || !info.CreatedAt.Equal(sa.CreatedAt) {
		t.Errorf("B.Info(A's sandbox) = %+v, %v; want running, run by this process", info, err)
	}
	if got := shOK(t, connectTo(t, b, sa.ID), "cat /workspace/file; echo $OWNER"); got != "from-a\na" {
		t.Errorf("A's sandbox through B's endpoint: %q", got)
	}
	if d := b.daemonOf(sa.ID); d != nil {
		t.Errorf("B holds a daemon for A's sandbox")
	}
	list, err := b.List(testCtx(t))
	if err != nil || len(list) != 2 {
		t.Errorf("B.List = %+v, %v; want both sandboxes", list, err)
	}
	for _, s := range list {
		if s.State != manage.StateRunning {
			t.Errorf("B.List: %s is %s (%s), want running", s.ID, s.State, s.Detail)
		}
	}

	// A third Provider starting on the directory reaps nothing that runs.
	c := newProvider(t, Config{StateDir: stateDir, Isolation: IsolationBwrap})
	select {
	case <-a.daemonDone(sa.ID):
		t.Fatalf("A's daemon died when another Provider started")
	default:
	}
	if a.cgroups != nil && !a.cgroups.open(sa.ID).exists() {
		t.Errorf("A's sandbox lost its cgroup when another Provider started")
	}
	shOK(t, connectTo(t, a, sa.ID), "true")
	if info, err := c.Info(testCtx(t), sb.ID); err != nil || info.State != manage.StateRunning {
		t.Errorf("C.Info(B's sandbox) = %+v, %v", info, err)
	}

	// Anyone may pause (the Manager decides when: once no other server
	// holds the workspace) and resume, and everyone sees it.
	if err := b.Pause(testCtx(t), sa.ID); err != nil {
		t.Fatalf("B.Pause(A's sandbox): %v", err)
	}
	if info, err := a.Info(testCtx(t), sa.ID); err != nil || info.State != manage.StatePaused {
		t.Errorf("A.Info after B paused = %+v, %v; want paused", info, err)
	}
	if err := b.Resume(testCtx(t), sa.ID); err != nil {
		t.Fatalf("B.Resume(the sandbox B paused): %v", err)
	}
	if err := a.Pause(testCtx(t), sa.ID); err != nil {
		t.Fatalf("A.Pause: %v", err)
	}
	if info, err := b.Info(testCtx(t), sa.ID); err != nil || info.State != manage.StatePaused {
		t.Errorf("B.Info(paused) = %+v, %v; want paused", info, err)
	}
	if err := b.Resume(testCtx(t), sa.ID); err != nil {
		t.Fatalf("B.Resume(A's paused sandbox): %v", err)
	}
	if info, err := a.Info(testCtx(t), sa.ID); err != nil || info.State != manage.StateRunning {
		t.Errorf("A.Info after B resumed = %+v, %v; want running", info, err)
	}
	if d := b.daemonOf(sa.ID); d != nil {
		t.Errorf("B started a daemon to resume A's paused sandbox")
	}
	if err := b.Resume(testCtx(t), sa.ID); err != nil {
		t.Errorf("B.Resume(A's running sandbox): %v", err)
	}
	shOK(t, connectTo(t, b, sa.ID), "true")

	// A closes (its server exits): B sees the sandbox stopped and takes it.
	_, all := sandboxPids(t, a, sa.ID)
	procs := snapshot(all)
	if err := a.Close(testCtx(t)); err != nil {
		t.Fatalf("A.Close: %v", err)
	}
	checkEnded(t, procs)
	info, err = b.Info(testCtx(t), sa.ID)
	if err != nil || info.State != manage.StateStopped || info.Detail != "daemon stopped: the sandbox-mcp process that ran it closed" || info.EndedAt.IsZero() {
		t.Errorf("B.Info after A closed = %+v, %v; want stopped", info, err)
	}
	if err := b.Resume(testCtx(t), sa.ID); err != nil {
		t.Fatalf("B.Resume(stopped): %v", err)
	}
	if d := b.daemonOf(sa.ID); d == nil || !d.alive() {
		t.Fatalf("B runs no daemon after resuming")
	}
	if got := shOK(t, connectTo(t, b, sa.ID), "cat /workspace/file; echo $OWNER"); got != "from-a\na" {
		t.Errorf("files and env after B resumed: %q", got)
	}
	if info, err := c.Info(testCtx(t), sa.ID); err != nil || info.State != manage.StateRunning {
		t.Errorf("C.Info after B resumed = %+v, %v; want running", info, err)
	}
}

// TestKillForeignSandbox kills a sandbox another Provider runs: through its
// cgroup, and (cgroups off) through its recorded process group.
func TestKillForeignSandbox(t *testing.T) {
	for _, mode := range []string{"bwrap", "none without cgroups"} {
		t.Run(mode, func(t *testing.T) {
			needBinary(t)
			stateDir := newStateDir(t)
			cfg := Config{StateDir: stateDir}
			if mode == "bwrap" {
				needBwrap(t, Config{})
				cfg.Isolation = IsolationBwrap
			} else {
				cfg.Isolation, cfg.Cgroups = IsolationNone, CgroupsOff
			}
			a := newProvider(t, cfg)
			b := newProvider(t, cfg)
			sa := create(t, a, manage.SandboxConfig{})
			ca := connectTo(t, a, sa.ID)
			h, err := ca.Start(testCtx(t), envdclient.Command{Cmd: "sleep", Args: []string{"1000"}}, envdclient.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			h.Disconnect()
			_, all := sandboxPids(t, a, sa.ID)
			if len(all) < 2 {
				t.Fatalf("sandbox processes: %v", all)
			}
			procs := snapshot(all)
			dir := a.dir(sa.ID)
			if err := b.Kill(testCtx(t), sa.ID); err != nil {
				t.Fatalf("B.Kill(A's sandbox): %v", err)
			}
			waitDone(t, a, sa.ID)
			checkEnded(t, procs)
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("directory after Kill: %v", err)
			}
			for name, p := range map[string]*Provider{"A": a, "B": b} {
				if info, err := p.Info(testCtx(t), sa.ID); err != nil || info.State != manage.StateGone {
					t.Errorf("%s.Info after Kill = %+v, %v; want gone", name, info, err)
				}
			}
			if a.cgroups != nil && a.cgroups.open(sa.ID).exists() {
				t.Errorf("the killed sandbox's cgroup is still there")
			}
		})
	}
}

// TestForeignSigstopPause: without a freezer the owner pauses with SIGSTOP;
// another Provider sees the sandbox paused and can resume it.
func TestForeignSigstopPause(t *testing.T) {
	needBinary(t)
	stateDir := newStateDir(t)
	a := needBwrap(t, Config{StateDir: stateDir, Cgroups: CgroupsOff})
	b := newProvider(t, Config{StateDir: stateDir, Isolation: IsolationBwrap, Cgroups: CgroupsOff})
	sa := create(t, a, manage.SandboxConfig{})
	if err := a.Pause(testCtx(t), sa.ID); err != nil {
		t.Fatalf("A.Pause: %v", err)
	}
	info, err := b.Info(testCtx(t), sa.ID)
	if err != nil || info.State != manage.StatePaused || !strings.HasPrefix(info.Detail, "stopped with SIGSTOP") {
		t.Errorf("B.Info = %+v, %v; want paused with SIGSTOP", info, err)
	}
	if err := b.Resume(testCtx(t), sa.ID); err != nil {
		t.Fatalf("B.Resume: %v", err)
	}
	if info, err := a.Info(testCtx(t), sa.ID); err != nil || info.State != manage.StateRunning {
		t.Errorf("A.Info after B resumed = %+v, %v; want running", info, err)
	}
	shOK(t, connectTo(t, a, sa.ID), "true")
}

// TestConcurrentResumeStartsOneDaemon resumes a stopped sandbox from two
// Providers at once, several times: exactly one daemon starts each time.
func TestConcurrentResumeStartsOneDaemon(t *testing.T) {
	needBinary(t)
	stateDir := newStateDir(t)
	a := needBwrap(t, Config{StateDir: stateDir})
	b := newProvider(t, Config{StateDir: stateDir, Isolation: IsolationBwrap})
	sb := create(t, a, manage.SandboxConfig{})
	shOK(t, connectTo(t, a, sb.ID), "echo kept > /workspace/file")
	for round := range 4 {
		// Stop it: kill the owner's daemon behind its back.
		owner := a
		if d := b.daemonOf(sb.ID); d != nil && d.alive() {
			owner = b
		}
		d := owner.daemonOf(sb.ID)
		if err := syscall.Kill(d.pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitDone(t, owner, sb.ID)
		for name, p := range map[string]*Provider{"A": a, "B": b} {
			if info, err := p.Info(testCtx(t), sb.ID); err != nil || info.State != manage.StateStopped {
				t.Fatalf("round %d: %s.Info = %+v, %v; want stopped", round, name, info, err)
			}
		}
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, p := range []*Provider{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = p.Resume(testCtx(t), sb.ID)
			}()
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: Resume: A %v, B %v", round, errs[0], errs[1])
		}
		running := 0
		for _, p := range []*Provider{a, b} {
			if d := p.daemonOf(sb.ID); d != nil && d.alive() {
				running++
			}
		}
		roots, _ := sandboxPids(t, a, sb.ID)
		if running != 1 || len(roots) != 1 {
			t.Fatalf("round %d: %d Providers run a daemon, %d daemon processes (%v); want 1 and 1", round, running, len(roots), roots)
		}
		if got := shOK(t, connectTo(t, b, sb.ID), "cat /workspace/file"); got != "kept" {
			t.Errorf("round %d: file after Resume: %q", round, got)
		}
	}
}

// TestServeAndCallShareStateDir runs the real binary: `serve` (stdio) keeps a
// named workspace's sandbox while `call` runs on the same state directory,
// once on a workspace of its own and once on serve's. (A test of the command
// more than of this package; it lives here for the helpers.)
func TestServeAndCallShareStateDir(t *testing.T) {
	requireBwrap(t)
	parent, err := os.MkdirTemp(testRoot, "serve")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(parent, "state")
	t.Cleanup(func() { killDetached(stateDir) })
	serve, err := mcpclient.NewStdioMCPClient(serverBinary, nil, "serve", "--state-dir", stateDir, "--log-level", "warn", "--workspace", "shared")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = serve.Close() }()
	ctx := testCtx(t)
	if err := serve.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	init.Params.ClientInfo = mcp.Implementation{Name: "local-test", Version: "0"}
	if _, err := serve.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	run := func(command string) string {
		t.Helper()
		req := mcp.CallToolRequest{}
		req.Params.Name = "workspace_exec"
		req.Params.Arguments = map[string]any{"command": command}
		res, err := serve.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("serve: workspace_exec %q: %v", command, err)
		}
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := mcp.AsTextContent(c); ok {
				text.WriteString(tc.Text + "\n")
			}
		}
		if res.IsError {
			t.Fatalf("serve: workspace_exec %q failed: %s", command, text.String())
		}
		return text.String()
	}
	if out := run("echo from-serve > shared.txt && cat shared.txt"); !strings.Contains(out, "from-serve") {
		t.Errorf("serve's first call: %s", out)
	}

	// While serve runs: a call with a workspace of its own, then one on
	// serve's workspace.
	out, stderr, err := runCall(t, stateDir, "workspace_info")
	if err != nil || !strings.Contains(out, "running") {
		t.Errorf("call workspace_info: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	out, stderr, err = runCall(t, stateDir, "--workspace", "shared", "workspace_exec", `{"command":"cat shared.txt; echo from-call >> shared.txt"}`)
	if err != nil || !strings.Contains(out, "from-serve") {
		t.Errorf("call on serve's workspace: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	// serve goes on working, on the same sandbox.
	if out := run("cat shared.txt"); !strings.Contains(out, "from-serve") || !strings.Contains(out, "from-call") {
		t.Errorf("serve after the calls: %s", out)
	}
}

// runCall runs `sandbox-mcp call args...` on stateDir.
func runCall(t *testing.T, stateDir string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, serverBinary, append([]string{"call", "--state-dir", stateDir, "--log-level", "warn"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

//go:build linux

package local

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

func TestPauseResume(t *testing.T) {
	t.Run("cgroup", func(t *testing.T) {
		p := needBwrap(t, Config{})
		if !p.Capabilities().Freezer {
			testenv.Missing(t, "a cgroup freezer (%s): run the tests as root, or in a delegated cgroup v2 subtree; sandbox-mcp doctor names the fix", p.Capabilities().CgroupError)
		}
		testPauseResume(t, p, func(t *testing.T, id string) {
			d := p.daemonOf(id)
			if p.cgroups.version == 1 {
				if got := readTrim(filepath.Join(d.cg.freezer, "freezer.state")); got != "FROZEN" {
					t.Errorf("freezer.state = %q, want FROZEN", got)
				}
			} else if got := readTrim(filepath.Join(d.cg.freezer, "cgroup.events")); !strings.Contains(got, "frozen 1") {
				t.Errorf("cgroup.events = %q, want frozen 1", got)
			}
			// Everything of the sandbox is in the frozen cgroup.
			_, all := sandboxPids(t, p, id)
			inCgroup := map[int]bool{}
			for _, pid := range d.cg.procs() {
				inCgroup[pid] = true
			}
			for _, pid := range all {
				// A zombie (a child that exited just before the freeze,
				// whose parent is now frozen) has left its cgroup.
				if st := procState(pid); !inCgroup[pid] && st != 'Z' && st != 0 {
					t.Errorf("process %d (%s) is not in the sandbox's cgroup %v", pid, cmdline(pid), d.cg.procs())
				}
			}
		})
	})
	t.Run("cgroup v2", func(t *testing.T) {
		needBinary(t)
		caps := Probe(context.Background(), Config{StateDir: newStateDir(t), EnvdBinary: envdBinary, Cgroups: CgroupsV2})
		if caps.CgroupVersion != 2 || !caps.Freezer {
			testenv.Missing(t, "a cgroup v2 freezer (%+v): run the tests as root, or in a delegated cgroup v2 subtree; sandbox-mcp doctor names the fix", caps)
		}
		p := newProvider(t, Config{Cgroups: CgroupsV2})
		testPauseResume(t, p, func(t *testing.T, id string) {
			d := p.daemonOf(id)
			if got := readTrim(filepath.Join(d.cg.freezer, "cgroup.events")); !strings.Contains(got, "frozen 1") {
				t.Errorf("cgroup.events = %q, want frozen 1", got)
			}
		})
	})
	t.Run("SIGSTOP", func(t *testing.T) {
		p := newProvider(t, Config{Cgroups: CgroupsOff})
		if p.Capabilities().Freezer {
			t.Fatal("a freezer with cgroups off")
		}
		testPauseResume(t, p, func(t *testing.T, id string) {
			_, all := sandboxPids(t, p, id)
			if len(all) < 3 {
				t.Errorf("sandbox processes: %v", all)
			}
			for _, pid := range all {
				// D: held in the kernel with SIGSTOP pending (a vfork
				// parent whose child is stopped).
				if s := procState(pid); s != 'T' && s != 'D' && s != 'Z' && s != 0 {
					t.Errorf("process %d (%s) is in state %c, want T (stopped)", pid, cmdline(pid), s)
				}
			}
		})
	})
}

// testPauseResume pauses a sandbox with a background writer, checks it with
// checkPaused, resumes it and checks the writer goes on.
func testPauseResume(t *testing.T, p *Provider, checkPaused func(t *testing.T, id string)) {
	sb := create(t, p, manage.SandboxConfig{})
	c := connectTo(t, p, sb.ID)
	h, err := c.Start(testCtx(t), envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", "while :; do date +%s%N >> counter; sleep 0.05; done"}}, envdclient.StartOptions{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer h.Disconnect()
	shOK(t, c, "while [ ! -s counter ]; do sleep 0.01; done")

	if err := p.Pause(testCtx(t), sb.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := p.Pause(testCtx(t), sb.ID); err != nil {
		t.Errorf("second Pause: %v", err)
	}
	info, err := p.Info(testCtx(t), sb.ID)
	if err != nil || info.State != manage.StatePaused {
		t.Errorf("Info while paused = %+v, %v", info, err)
	}
	checkPaused(t, sb.ID)

	if err := p.Resume(testCtx(t), sb.ID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if err := p.Resume(testCtx(t), sb.ID); err != nil {
		t.Errorf("second Resume: %v", err)
	}
	info, err = p.Info(testCtx(t), sb.ID)
	if err != nil || info.State != manage.StateRunning {
		t.Errorf("Info after Resume = %+v, %v", info, err)
	}
	// The writer from before the pause goes on writing.
	shOK(t, c, `n=$(wc -l < counter); while [ "$(wc -l < counter)" -le "$n" ]; do sleep 0.01; done`)
	if err := h.Kill(testCtx(t)); err != nil {
		t.Errorf("kill the writer: %v", err)
	}
	// A paused sandbox can be killed.
	if err := p.Pause(testCtx(t), sb.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := p.Kill(testCtx(t), sb.ID); err != nil {
		t.Fatalf("Kill of a paused sandbox: %v", err)
	}
	waitDone(t, p, sb.ID)
}

func TestStoppedSandboxResumes(t *testing.T) {
	needBinary(t)
	stateDir := newStateDir(t)
	p1 := needBwrap(t, Config{StateDir: stateDir})
	sb := create(t, p1, manage.SandboxConfig{Env: map[string]string{"KEPT": "yes"}})
	c := connectTo(t, p1, sb.ID)
	shOK(t, c, "echo kept > /workspace/file")
	h, err := c.Start(testCtx(t), envdclient.Command{Cmd: "sleep", Args: []string{"1000"}}, envdclient.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.Disconnect()

	// A server restart: the daemons die, the directories stay.
	if err := p1.Close(testCtx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitDone(t, p1, sb.ID)
	if _, err := p1.Create(testCtx(t), manage.SandboxConfig{}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("Create after Close: %v", err)
	}

	p2 := newProvider(t, Config{StateDir: stateDir, Isolation: IsolationBwrap})
	info, err := p2.Info(testCtx(t), sb.ID)
	if err != nil || info.State != manage.StateStopped || info.Detail != "daemon stopped: the sandbox-mcp process that ran it closed" ||
		!info.CreatedAt.Equal(sb.CreatedAt) || info.EndedAt.IsZero() {
		t.Errorf("Info after restart = %+v, %v; want stopped by Close, created %v, with an end time", info, err, sb.CreatedAt)
	}
	list, err := p2.List(testCtx(t))
	if err != nil || len(list) != 1 || list[0].ID != sb.ID || list[0].State != manage.StateStopped {
		t.Errorf("List after restart = %+v, %v", list, err)
	}
	if err := p2.Pause(testCtx(t), sb.ID); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("Pause of a stopped sandbox: %v, want FailedPrecondition", err)
	}
	if err := p2.Resume(testCtx(t), sb.ID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	info, err = p2.Info(testCtx(t), sb.ID)
	if err != nil || info.State != manage.StateRunning {
		t.Errorf("Info after Resume = %+v, %v", info, err)
	}
	c2 := connectTo(t, p2, sb.ID)
	if got := shOK(t, c2, "cat /workspace/file; echo $KEPT"); got != "kept\nyes" {
		t.Errorf("files and env after Resume: %q", got)
	}
	if out := shOK(t, c2, "ps -e -o comm="); strings.Contains(out, "sleep") {
		t.Errorf("a process from before the restart runs:\n%s", out)
	}
}

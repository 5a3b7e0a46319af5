//go:build linux

package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

func TestNewKillsLeftoversOfACrashedServer(t *testing.T) {
	needBinary(t)
	stateDir := newStateDir(t)
	p1 := newProvider(t, Config{StateDir: stateDir, Isolation: IsolationNone})
	if p1.cgroups == nil {
		testenv.Missing(t, "cgroups (%s): run the tests as root, or in a delegated cgroup v2 subtree; sandbox-mcp doctor names the fix", p1.Capabilities().CgroupError)
	}
	sb := create(t, p1, manage.SandboxConfig{})
	if err := p1.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// What a crash leaves of an unisolated sandbox: a process of it still
	// in its cgroup, with no envd.
	cg, err := p1.cgroups.create(sb.ID, cgroupLimits{})
	if err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("sleep", "1000")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	if err := cg.add(orphan.Process.Pid); err != nil {
		_ = orphan.Process.Kill()
		t.Fatal(err)
	}
	p2 := newProvider(t, Config{StateDir: stateDir, Isolation: IsolationNone})
	select {
	case err := <-exited:
		if err == nil {
			t.Errorf("the leftover process exited by itself, want it killed")
		}
	case <-time.After(30 * time.Second):
		_ = orphan.Process.Kill()
		t.Fatal("the leftover process still runs after New")
	}
	if cg.exists() {
		t.Errorf("the stale cgroup is still there")
	}
	info, err := p2.Info(testCtx(t), sb.ID)
	if err != nil || info.State != manage.StateStopped {
		t.Errorf("Info = %+v, %v; want stopped", info, err)
	}
}

func TestNewRemovesUnfinishedCreates(t *testing.T) {
	needBinary(t)
	stateDir := newStateDir(t)
	sandboxes := filepath.Join(stateDir, "sandboxes")
	stale, fresh := filepath.Join(sandboxes, newDirPrefix+"lstale"), filepath.Join(sandboxes, newDirPrefix+"lfresh")
	for _, dir := range []string{stale, fresh} {
		if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o711); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleNewDirAge)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, Config{StateDir: stateDir, Isolation: IsolationNone})
	if err := p.Close(testCtx(t)); err != nil { // waits for the background removal
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("an unfinished create from long ago is still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a create in progress elsewhere was removed: %v", err)
	}
}

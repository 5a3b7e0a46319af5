//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

func TestCreateRunKill(t *testing.T) {
	p := needBwrap(t, Config{})
	sb := create(t, p, manage.SandboxConfig{Env: map[string]string{"GREETING": "hello"}})
	if !validID(sb.ID) || sb.ID[0] != 'l' || len(sb.ID) != 16 {
		t.Errorf("id %q: want l and 15 lowercase alphanumerics", sb.ID)
	}
	if sb.Provider != "local" || sb.State != manage.StateRunning || sb.Isolation != "bwrap" || sb.Workdir != "/workspace" ||
		sb.EnvdVersion == "" || sb.CreatedAt.IsZero() || len(sb.Warnings) != 0 {
		t.Errorf("Create = %+v", sb)
	}
	c := connectTo(t, p, sb.ID)
	shOK(t, c, "true")
	if got := shOK(t, c, `echo "$(id -u):$(id -g) $(pwd) $HOME $TMPDIR $LANG $GREETING"`); got != "1000:1000 /workspace /workspace /tmp C.UTF-8 hello" {
		t.Errorf("identity and environment: %q", got)
	}
	shOK(t, c, "echo data > /workspace/file && echo tmp > /tmp/file")
	dir := p.dir(sb.ID)
	if data, err := os.ReadFile(filepath.Join(dir, "workspace", "file")); err != nil || string(data) != "data\n" {
		t.Errorf("workspace file on the host: %q, %v", data, err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "tmp", "file")); err != nil || string(data) != "tmp\n" {
		t.Errorf("/tmp file on the host: %q, %v", data, err)
	}

	info, err := p.Info(testCtx(t), sb.ID)
	if err != nil || info.State != manage.StateRunning {
		t.Fatalf("Info = %+v, %v; want running", info, err)
	}
	if err := p.Kill(testCtx(t), sb.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory after Kill: %v", err)
	}
	info, err = p.Info(testCtx(t), sb.ID)
	if err != nil || info.State != manage.StateGone || info.Detail != "not found" {
		t.Errorf("Info after Kill = %+v, %v; want gone, not found", info, err)
	}
	if err := p.Kill(testCtx(t), sb.ID); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if _, err := p.Endpoint(testCtx(t), sb.ID); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Endpoint after Kill: %v, want NotFound", err)
	}
}

func TestInfoNoticesKilledDaemon(t *testing.T) {
	for _, isolation := range []string{IsolationBwrap, IsolationNone} {
		for _, victim := range []string{"envd", "outer"} {
			t.Run(isolation+"/"+victim, func(t *testing.T) {
				var p *Provider
				if isolation == IsolationBwrap {
					p = needBwrap(t, Config{})
				} else {
					p = newProvider(t, Config{Isolation: IsolationNone})
				}
				sb := create(t, p, manage.SandboxConfig{})
				shOK(t, connectTo(t, p, sb.ID), "true")
				roots, all := sandboxPids(t, p, sb.ID)
				if len(roots) != 1 {
					t.Fatalf("processes naming the sandbox directory: %v", roots)
				}
				pid := roots[0] // bwrap, or envd without isolation
				if victim == "envd" {
					pid = 0
					for _, q := range all {
						if strings.Contains(cmdline(q), "envd --listen") {
							pid = q
						}
					}
					if pid == 0 {
						t.Fatalf("no envd among %v", all)
					}
				}
				procs := snapshot(all)
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				waitDone(t, p, sb.ID)
				info, err := p.Info(testCtx(t), sb.ID)
				if err != nil || info.State != manage.StateStopped || info.Detail != "daemon exited: signal: killed" {
					t.Errorf("Info = %+v, %v; want stopped, daemon exited: signal: killed", info, err)
				}
				checkEnded(t, procs)
				// Files are kept: the sandbox comes back with Resume.
				if err := p.Resume(testCtx(t), sb.ID); err != nil {
					t.Fatalf("Resume: %v", err)
				}
				shOK(t, connectTo(t, p, sb.ID), "true")
			})
		}
	}
}

func TestInfoDirectoryRemoved(t *testing.T) {
	// Without a disk image: a mounted one keeps a running sandbox's
	// directory from being removed by hand (EBUSY).
	p := needBwrap(t, Config{Disk: -1})
	sb := create(t, p, manage.SandboxConfig{})
	_, all := sandboxPids(t, p, sb.ID)
	procs := snapshot(all)
	if err := os.RemoveAll(p.dir(sb.ID)); err != nil {
		t.Fatal(err)
	}
	info, err := p.Info(testCtx(t), sb.ID)
	if err != nil || info.State != manage.StateGone || info.Detail != "directory removed" {
		t.Errorf("Info = %+v, %v; want gone, directory removed", info, err)
	}
	waitDone(t, p, sb.ID)
	checkEnded(t, procs)
	if err := p.Kill(testCtx(t), sb.ID); err != nil {
		t.Errorf("Kill of the removed sandbox: %v", err)
	}
}

func TestStartFailures(t *testing.T) {
	needBinary(t)
	dir, err := os.MkdirTemp(testRoot, "badenvd")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "sandbox-mcp")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho 'boom: envd cannot start' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, isolation := range []string{IsolationBwrap, IsolationNone} {
		t.Run(isolation, func(t *testing.T) {
			var p *Provider
			if isolation == IsolationBwrap {
				p = needBwrap(t, Config{EnvdBinary: bad})
			} else {
				p = newProvider(t, Config{Isolation: IsolationNone, EnvdBinary: bad})
			}
			_, err := p.Create(testCtx(t), manage.SandboxConfig{})
			if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "boom: envd cannot start") {
				t.Fatalf("Create = %v; want the exit status and the daemon's stderr", err)
			}
			if list, err := p.List(testCtx(t)); err != nil || len(list) != 0 {
				t.Errorf("List after a failed Create = %+v, %v; want nothing left", list, err)
			}
		})
	}
}

func TestStateDirFaults(t *testing.T) {
	needBinary(t)
	file := filepath.Join(newStateDir(t), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(file, "state")
	_, err := New(context.Background(), Config{StateDir: stateDir, EnvdBinary: envdBinary})
	if err == nil || !strings.Contains(err.Error(), stateDir) {
		t.Errorf("New on a state directory that cannot be made = %v; want an error naming it", err)
	}
	if os.Geteuid() != 0 {
		ro := newStateDir(t)
		if err := os.Chmod(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		_, err := New(context.Background(), Config{StateDir: ro, EnvdBinary: envdBinary})
		if err == nil || !strings.Contains(err.Error(), ro) {
			t.Errorf("New on a read-only state directory = %v; want an error naming it", err)
		}
	}
	long := filepath.Join(newStateDir(t), strings.Repeat("x", 100))
	if _, err := New(context.Background(), Config{StateDir: long, EnvdBinary: envdBinary}); err == nil || !strings.Contains(err.Error(), "107") {
		t.Errorf("New on a state directory too long for sockets = %v", err)
	}
}

func TestKillLeavesOthersAlone(t *testing.T) {
	p := needBwrap(t, Config{})
	a := create(t, p, manage.SandboxConfig{})
	b := create(t, p, manage.SandboxConfig{})
	cb := connectTo(t, p, b.ID)
	shOK(t, cb, "echo b > /workspace/b.txt")
	if err := p.Kill(testCtx(t), a.ID); err != nil {
		t.Fatal(err)
	}
	if got := shOK(t, cb, "cat /workspace/b.txt"); got != "b" {
		t.Errorf("b's file after killing a: %q", got)
	}
	info, err := p.Info(testCtx(t), b.ID)
	if err != nil || info.State != manage.StateRunning {
		t.Errorf("Info(b) = %+v, %v", info, err)
	}
	list, err := p.List(testCtx(t))
	if err != nil || len(list) != 1 || list[0].ID != b.ID {
		t.Errorf("List = %+v, %v; want only b", list, err)
	}
	if cg := p.cgroups; cg != nil && !cg.open(b.ID).exists() {
		t.Errorf("b's cgroup is gone")
	}
}

func TestCanceledContext(t *testing.T) {
	p := newProvider(t, Config{Isolation: IsolationNone})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Create(ctx, manage.SandboxConfig{}); connect.CodeOf(err) != connect.CodeCanceled {
		t.Errorf("Create with a canceled context = %v", err)
	}
	if list, err := p.List(testCtx(t)); err != nil || len(list) != 0 {
		t.Errorf("List = %+v, %v; want nothing", list, err)
	}
	// A call waiting for a busy sandbox gives up when its context ends.
	sb := create(t, p, manage.SandboxConfig{})
	e := p.entry(sb.ID)
	if err := e.acquire(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Info(ctx, sb.ID); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("Info on a busy sandbox = %v, want DeadlineExceeded", err)
	}
	e.release()
}

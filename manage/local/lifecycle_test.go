//go:build linux

package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
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
	p := needBwrap(t, Config{})
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

func TestLimits(t *testing.T) {
	lim := manage.Limits{MemoryBytes: 256 << 20, Pids: 200, NoFile: 1234, CPUs: 0.5}
	t.Run("bwrap", func(t *testing.T) {
		p := needBwrap(t, Config{})
		sb := create(t, p, manage.SandboxConfig{Limits: lim})
		c := connectTo(t, p, sb.ID)
		if got := shOK(t, c, "ulimit -n; ulimit -Hn; ulimit -p"); got != "1234\n1234\n200" {
			t.Errorf("ulimit -n, -Hn, -p inside: %q, want 1234 1234 200", got)
		}
		checkCgroupLimits(t, p, sb.ID, lim)

		// The defaults: 4096 processes, 65536 files, half the RAM, capped
		// at the server's own hard limits when it may not raise them.
		def := create(t, p, manage.SandboxConfig{})
		nofile, pids := capped(t, 65536, unix.RLIMIT_NOFILE), capped(t, 4096, unix.RLIMIT_NPROC)
		if got := shOK(t, connectTo(t, p, def.ID), "ulimit -n; ulimit -p"); got != fmt.Sprintf("%d\n%d", nofile, pids) {
			t.Errorf("default ulimit -n, -p: %q, want %d %d", got, nofile, pids)
		}
		checkCgroupLimits(t, p, def.ID, manage.Limits{MemoryBytes: halfRAM(t), Pids: int64(pids)})
	})
	t.Run("bwrap as the server's uid", func(t *testing.T) {
		// HostUID -1: no unprivileged host user, so rlimits are set with
		// prlimit(2) on the sandbox's first process (same uid).
		p := needBwrap(t, Config{HostUID: -1, HostGID: -1})
		sb := create(t, p, manage.SandboxConfig{Limits: lim})
		if got := shOK(t, connectTo(t, p, sb.ID), "ulimit -n; ulimit -Hn; ulimit -p"); got != "1234\n1234\n200" {
			t.Errorf("ulimit -n, -Hn, -p inside: %q, want 1234 1234 200", got)
		}
		checkCgroupLimits(t, p, sb.ID, lim)
	})
	t.Run("none", func(t *testing.T) {
		p := newProvider(t, Config{Isolation: IsolationNone})
		sb := create(t, p, manage.SandboxConfig{Limits: lim})
		if got := shOK(t, connectTo(t, p, sb.ID), "ulimit -n; ulimit -Hn"); got != "1234\n1234" {
			t.Errorf("ulimit -n, -Hn inside: %q, want 1234 1234", got)
		}
		checkCgroupLimits(t, p, sb.ID, lim)
	})
}

// capped is def, or the server's hard limit of resource when that is lower
// and the server may not raise it.
func capped(t *testing.T, def uint64, resource int) uint64 {
	t.Helper()
	if hasCapability(unix.CAP_SYS_RESOURCE) {
		return def
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(resource, &lim); err != nil {
		t.Fatal(err)
	}
	return min(def, lim.Max)
}

// halfRAM is half of MemTotal in /proc/meminfo, rounded down to pages.
func halfRAM(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("MemTotal: %q: %v", rest, err)
			}
			page := int64(os.Getpagesize())
			return kb * 1024 / 2 / page * page
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// checkCgroupLimits reads back the limits in the sandbox's cgroup.
func checkCgroupLimits(t *testing.T, p *Provider, id string, lim manage.Limits) {
	t.Helper()
	cg := p.cgroups
	if cg == nil {
		testenv.Missing(t, "cgroups (%s): run the tests as root, or in a delegated cgroup v2 subtree; sandbox-mcp doctor names the fix", p.Capabilities().CgroupError)
		return
	}
	type knob struct{ file, want string }
	var knobs []knob
	if cg.version == 1 {
		if cg.memory {
			knobs = append(knobs, knob{filepath.Join(cg.v1["memory"], id, "memory.limit_in_bytes"), fmt.Sprint(lim.MemoryBytes)})
		}
		if cg.pids {
			knobs = append(knobs, knob{filepath.Join(cg.v1["pids"], id, "pids.max"), fmt.Sprint(lim.Pids)})
		}
		if cg.cpu && lim.CPUs > 0 {
			knobs = append(knobs, knob{filepath.Join(cg.v1["cpu"], id, "cpu.cfs_quota_us"), fmt.Sprint(int64(lim.CPUs * 100000))})
		}
	} else {
		dir := filepath.Join(cg.v2, id)
		if cg.memory {
			knobs = append(knobs, knob{filepath.Join(dir, "memory.max"), fmt.Sprint(lim.MemoryBytes)})
		}
		if cg.pids {
			knobs = append(knobs, knob{filepath.Join(dir, "pids.max"), fmt.Sprint(lim.Pids)})
		}
		if cg.cpu && lim.CPUs > 0 {
			knobs = append(knobs, knob{filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d 100000", int64(lim.CPUs*100000))})
		}
	}
	if len(knobs) == 0 {
		testenv.Missing(t, "a cgroup controller with limits (memory, pids or cpu): run the tests as root, or in a delegated cgroup v2 subtree; sandbox-mcp doctor names the fix")
	}
	for _, k := range knobs {
		if got := readTrim(k.file); got != k.want {
			t.Errorf("%s = %q, want %q", k.file, got, k.want)
		}
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

func TestConcurrentUse(t *testing.T) {
	p := needBwrap(t, Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testCtx(t)
			sb, err := p.Create(ctx, manage.SandboxConfig{})
			if err != nil {
				errs <- err
				return
			}
			ep, err := p.Endpoint(ctx, sb.ID)
			if err != nil {
				errs <- err
				return
			}
			c, err := envdclient.New(ep.URL)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			res, err := c.Run(ctx, envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", fmt.Sprintf("echo %d > /workspace/n; cat /workspace/n", i)}}, envdclient.RunOptions{})
			if err != nil || strings.TrimSpace(string(res.Stdout.Bytes())) != fmt.Sprint(i) {
				errs <- fmt.Errorf("sandbox %d: %+v, %v", i, res, err)
				return
			}
			if _, err := p.List(ctx); err != nil {
				errs <- err
			}
			if err := p.Pause(ctx, sb.ID); err != nil {
				errs <- err
			}
			if err := p.Resume(ctx, sb.ID); err != nil {
				errs <- err
			}
			if err := p.Kill(ctx, sb.ID); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if list, err := p.List(testCtx(t)); err != nil || len(list) != 0 {
		t.Errorf("List after killing all = %+v, %v", list, err)
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

// TestCloseDuringCreate closes the provider while a Create waits for its
// daemon to get ready. Close cannot see that daemon: Create must stop it
// itself and fail, leaving nothing running and no directory behind.
func TestCloseDuringCreate(t *testing.T) {
	needBinary(t)
	dir, err := os.MkdirTemp(testRoot, "slowenvd")
	if err != nil {
		t.Fatal(err)
	}
	// The daemon waits at a fifo before it becomes envd.
	gate := filepath.Join(dir, "gate")
	if err := unix.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	slow := filepath.Join(dir, "sandbox-mcp")
	script := fmt.Sprintf("#!/bin/sh\nread go < %s\nexec %s \"$@\"\n", gate, envdBinary)
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, Config{Isolation: IsolationNone, EnvdBinary: slow})

	type result struct {
		sb  manage.Sandbox
		err error
	}
	created := make(chan result, 1)
	go func() {
		sb, err := p.Create(testCtx(t), manage.SandboxConfig{})
		created <- result{sb, err}
	}()
	// Opening the fifo for writing returns once the daemon opened it to
	// read: Create is then waiting for it to get ready.
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
		}
		opened <- f
	}()
	var w *os.File
	select {
	case w = <-opened:
	case r := <-created:
		t.Fatalf("Create returned before its daemon started: %+v, %v", r.sb, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon never opened the fifo")
	}
	if w == nil {
		t.FailNow()
	}
	entries, err := os.ReadDir(p.sandboxesDir)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, de := range entries {
		if validID(de.Name()) {
			id = de.Name()
		}
	}
	_, all := sandboxPids(t, p, id)
	if id == "" || len(all) == 0 {
		t.Fatalf("no sandbox directory or no daemon process while Create waits: %v, %v", entries, all)
	}
	procs := snapshot(all)

	if err := p.Close(testCtx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := w.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	var r result
	select {
	case r = <-created:
	case <-time.After(30 * time.Second):
		t.Fatal("Create did not return")
	}
	if connect.CodeOf(r.err) != connect.CodeFailedPrecondition {
		t.Errorf("Create across Close = %+v, %v; want FailedPrecondition", r.sb, r.err)
	}
	checkEnded(t, procs)
	if roots, _ := sandboxPids(t, p, id); len(roots) != 0 {
		t.Errorf("processes of the sandbox run after Create failed: %v", roots)
	}
	if _, err := os.Stat(p.dir(id)); !os.IsNotExist(err) {
		t.Errorf("the sandbox directory after the failed Create: %v", err)
	}
}

//go:build linux

package local

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// failedStarts is how many times each failing start is repeated, to expose
// races between the failure and the processes it must end.
func failedStarts() int {
	if testing.Short() {
		return 3
	}
	return 20
}

// leakSettle bounds the wait for what a failed start leaves to go away by
// itself: killed processes exit, and their loop device is freed, a moment
// after the kill, and the kernel reports neither to this process.
const leakSettle = 10 * time.Second

// startLeak is what one failed start left behind.
type startLeak struct {
	procs   []int // live (not zombie) processes of the start
	cgroup  bool
	mounts  []string
	loops   []string
	dir     bool // the sandbox directory, or its hidden new one
	claimed bool // the host id claim still names the sandbox
}

func (l startLeak) any() bool {
	return len(l.procs) > 0 || l.cgroup || len(l.mounts) > 0 || len(l.loops) > 0 || l.dir || l.claimed
}

// startLeftovers looks for what the start of sandbox id, with host id uid
// (0: none of its own), left: processes that run as uid or name its
// directory on their command line (bwrap, the keeper, an unisolated envd),
// its cgroup, mounts under its directory and the loop devices of its disk
// image, its directory and its host id claim. Zombies are not counted: they
// run nothing (on this host PID 1 reaps orphaned bwraps lazily), though they
// count against their uid's RLIMIT_NPROC until reaped, which host id
// allocation allows for (hostids.go).
func startLeftovers(p *Provider, id string, uid int) startLeak {
	dir := filepath.Join(p.sandboxesDir, id)
	var l startLeak
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil || bytes.Contains(status, []byte("\nState:\tZ")) {
			continue
		}
		mine := false
		if uid != 0 {
			for _, line := range strings.Split(string(status), "\n") {
				if rest, ok := strings.CutPrefix(line, "Uid:"); ok && strings.Contains(" "+strings.Join(strings.Fields(rest), " ")+" ", " "+strconv.Itoa(uid)+" ") {
					mine = true
				}
			}
		}
		if cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(cl, []byte(dir+"/")) {
			mine = true
		}
		if mine {
			l.procs = append(l.procs, pid)
		}
	}
	if p.cgroups != nil {
		l.cgroup = p.cgroups.open(id).exists()
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) > 4 && (strings.HasPrefix(f[4], dir+"/") || strings.HasPrefix(f[4], filepath.Join(p.sandboxesDir, newDirPrefix+id)+"/")) {
				l.mounts = append(l.mounts, f[4])
			}
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range loops {
		if b := readTrim(f); strings.Contains(b, "/"+id+"/") || strings.Contains(b, "/"+newDirPrefix+id+"/") {
			l.loops = append(l.loops, filepath.Base(filepath.Dir(filepath.Dir(f)))+" "+b)
		}
	}
	for _, d := range []string{dir, filepath.Join(p.sandboxesDir, newDirPrefix+id)} {
		if _, err := os.Lstat(d); err == nil {
			l.dir = true
		}
	}
	if p.hostIDs != nil && uid != 0 {
		if holder, err := os.ReadFile(filepath.Join(p.hostIDs.dir, strconv.Itoa(uid))); err == nil && p.hostIDs.claimedBy(string(holder), id) {
			l.claimed = true
		}
	}
	return l
}

// settledLeftovers waits (up to leakSettle) until the start left nothing,
// and returns what is left then.
func settledLeftovers(p *Provider, id string, uid int) startLeak {
	ctx, cancel := context.WithTimeout(context.Background(), leakSettle)
	defer cancel()
	var l startLeak
	_ = poll(ctx, time.Millisecond, 50*time.Millisecond, func() (bool, error) {
		l = startLeftovers(p, id, uid)
		return !l.any(), nil
	})
	return l
}

// sweepLeak ends what a leaking start left, so the next start is judged on
// its own.
func sweepLeak(p *Provider, id string, l startLeak) {
	for _, pid := range l.procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if p.cgroups != nil {
		_ = p.cgroups.open(id).remove(context.Background())
	}
	for _, d := range []string{filepath.Join(p.sandboxesDir, id), filepath.Join(p.sandboxesDir, newDirPrefix+id)} {
		_ = removeSandboxDir(d)
	}
}

// fakeTools is a directory the sandbox user can reach holding scripts that
// stand in for bwrap or envd.
func fakeTools(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(testRoot, "fake")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"envd-exits":     "#!/bin/sh\necho envd gives up >&2\nexit 3\n",
		"envd-never":     "#!/bin/sh\nexec sleep 1000\n",
		"envd-noexec":    "#!/bin/sh\nexit 0\n",
		"bwrap-exits":    "#!/bin/sh\nexit 1\n",
		"bwrap-hangs":    "#!/bin/sh\nexec sleep 1000\n",
		"bwrap-children": "#!/bin/sh\nsleep 1000 &\nsleep 1000\n",
	} {
		mode := os.FileMode(0o755)
		if name == "envd-noexec" {
			mode = 0o644
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// failingStart is one way for a start to fail: setup breaks p (and returns
// what undoes it), cfg is the sandbox asked for, cancelAt the stage at which
// the start's context is cancelled ("": never).
type failingStart struct {
	name     string
	setup    func(p *Provider, fake string) (undo func())
	cfg      manage.SandboxConfig
	cancelAt startStage
}

func setEnvd(path string) func(p *Provider, fake string) func() {
	return func(p *Provider, fake string) func() {
		old := p.envd.source
		if !filepath.IsAbs(path) {
			p.envd.source = filepath.Join(fake, path)
		} else {
			p.envd.source = path
		}
		return func() { p.envd.source = old }
	}
}

func setBwrap(path string) func(p *Provider, fake string) func() {
	return func(p *Provider, fake string) func() {
		old := p.bwrapPath
		if !filepath.IsAbs(path) {
			p.bwrapPath = filepath.Join(fake, path)
		} else {
			p.bwrapPath = path
		}
		return func() { p.bwrapPath = old }
	}
}

func failingStarts() []failingStart {
	return []failingStart{
		{name: "bwrap missing", setup: setBwrap("/nonexistent/bwrap")},
		{name: "bwrap exits early", setup: setBwrap("bwrap-exits")},
		{name: "bwrap never reports", setup: setBwrap("bwrap-hangs"), cancelAt: stageRegistered},
		{name: "bwrap forks and never reports", setup: setBwrap("bwrap-children"), cancelAt: stageRegistered},
		{name: "envd missing", setup: setEnvd("/nonexistent/envd")},
		{name: "envd not executable", setup: setEnvd("envd-noexec")},
		{name: "envd exits before ready", setup: setEnvd("envd-exits")},
		{name: "cancelled before the cgroup", cancelAt: stageStarted},
		{name: "cancelled before confinement", cancelAt: stageRegistered},
		{name: "ready never comes, cancelled", setup: setEnvd("envd-never"), cancelAt: stageConfined},
		{name: "cgroup limit refused", cfg: manage.SandboxConfig{Limits: manage.Limits{CPUs: 1e12}}},
		{name: "disk image fails and envd exits", setup: func(p *Provider, fake string) func() {
			undoEnvd := setEnvd("envd-exits")(p, fake)
			if p.disk == nil {
				return undoEnvd
			}
			// No template cached or on disk, and mkfs fails: the image
			// cannot be made.
			q := p.disk
			q.mu.Lock()
			oldMkfs, oldDir, oldTmpl := q.mkfs, q.templates, q.tmpl
			empty, err := os.MkdirTemp("", "no-templates-")
			if err != nil {
				panic(err)
			}
			q.mkfs, q.templates, q.tmpl = "/bin/false", empty, diskTemplate{}
			q.mu.Unlock()
			return func() {
				q.mu.Lock()
				q.mkfs, q.templates, q.tmpl = oldMkfs, oldDir, oldTmpl
				q.mu.Unlock()
				_ = os.RemoveAll(empty)
				undoEnvd()
			}
		}},
	}
}

// leakTestIDs is a range of host ids of this test process's own, so that
// sandboxes of tests running elsewhere on the machine are not mistaken for
// leaks.
func leakTestIDs() IDRange {
	return IDRange{First: DefaultSandboxIDs.First + 40000 + (os.Getpid()%1000)*20, Count: 20}
}

// TestFailedStartsLeakNothing fails each step of a sandbox's start, many
// times over, for a sandbox that dies with its server and for a detached
// one, and requires that each failed start leaves nothing: no live process,
// cgroup, mount, loop device, directory or host id claim, and that the next
// start works.
func TestFailedStartsLeakNothing(t *testing.T) {
	for _, named := range []bool{false, true} {
		mode := "attached"
		if named {
			mode = "detached"
		}
		t.Run(mode, func(t *testing.T) {
			requireBwrap(t)
			fake := fakeTools(t)
			cfg := Config{}
			if os.Geteuid() == 0 {
				cfg.SandboxIDs = leakTestIDs()
			}
			p := needBwrap(t, cfg)
			for _, fs := range failingStarts() {
				t.Run(fs.name, func(t *testing.T) {
					var id string
					var uid int
					var cancel context.CancelFunc
					p.startHook = func(ctx context.Context, stage startStage, sid string) {
						if stage == stageBegin {
							id = sid
							uid, _ = strconv.Atoi(readTrim(filepath.Join(p.sandboxesDir, sid, hostIDFile)))
						}
						if stage == fs.cancelAt {
							cancel()
						}
					}
					defer func() { p.startHook = nil }()
					undo := func() {}
					if fs.setup != nil {
						undo = fs.setup(p, fake)
					}
					n := failedStarts()
					leaked := 0
					for i := range n {
						id, uid = "", 0
						var ctx context.Context
						ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
						sbCfg := fs.cfg
						sbCfg.Named = named
						sb, err := p.Create(ctx, sbCfg)
						cancel()
						if err == nil {
							undo()
							t.Fatalf("start %d: Create = %s, want an error", i, sb.ID)
						}
						if id == "" {
							t.Fatalf("start %d: failed before it began: %v", i, err)
						}
						if l := settledLeftovers(p, id, uid); l.any() {
							leaked++
							t.Logf("start %d (%v) left %+v", i, err, l)
							for _, pid := range l.procs {
								st, _ := readStat(pid)
								t.Logf("  process %d (state %c, parent %d, uid %d): %s", pid, st.state, st.ppid, procUID(pid), cmdline(pid))
							}
							sweepLeak(p, id, l)
						}
					}
					undo()
					if leaked > 0 {
						t.Errorf("%d of %d failed starts leaked", leaked, n)
					}
					p.startHook = nil
					sb := create(t, p, manage.SandboxConfig{Named: named})
					shOK(t, connectTo(t, p, sb.ID), "true")
					if err := p.Kill(testCtx(t), sb.ID); err != nil {
						t.Fatalf("Kill: %v", err)
					}
				})
			}
		})
	}
}

// TestServerKilledMidStartLeavesNothing kills the real binary (SIGKILL) while
// it starts a sandbox, as soon as the sandbox's bwrap runs, and starts a
// fresh Provider on its state directory: whatever the killed start left
// (processes outside the cgroup, the cgroup, the mounted disk image) is gone
// then, the sandbox is stopped and resumable with its host id kept, and new
// sandboxes start.
func TestServerKilledMidStartLeavesNothing(t *testing.T) {
	requireBwrap(t)
	n := 5
	if testing.Short() {
		n = 2
	}
	ids := leakTestIDs()
	for i := range n {
		stateDir := newStateDir(t)
		args := []string{"call", "--state-dir", stateDir, "--log-level", "warn"}
		if os.Geteuid() == 0 {
			args = append(args, "--sandbox-ids", ids.String())
		}
		cmd := exec.Command(serverBinary, append(args, "workspace_exec", `{"command":"true"}`)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		// The kernel announces no exec: look for the sandbox's bwrap.
		mark := []byte(filepath.Join(stateDir, "sandboxes") + "/")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := poll(ctx, 100*time.Microsecond, 5*time.Millisecond, func() (bool, error) {
			entries, _ := os.ReadDir("/proc")
			for _, e := range entries {
				cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
				if err == nil && bytes.HasSuffix(bytes.SplitN(cl, []byte{0}, 2)[0], []byte("bwrap")) && bytes.Contains(cl, mark) {
					return true, nil
				}
			}
			select {
			case <-exited:
				return false, errors.New("the server exited before its sandbox's bwrap ran")
			default:
				return false, nil
			}
		})
		cancel()
		_ = cmd.Process.Kill()
		<-exited
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		cfg := Config{StateDir: stateDir, Isolation: IsolationBwrap}
		if os.Geteuid() == 0 {
			cfg.SandboxIDs = ids
		}
		p := newProvider(t, cfg)
		list, err := p.List(testCtx(t))
		if err != nil || len(list) != 1 {
			t.Fatalf("round %d: List = %+v, %v; want the one sandbox", i, list, err)
		}
		sb := list[0]
		uid, _ := strconv.Atoi(readTrim(filepath.Join(p.sandboxesDir, sb.ID, hostIDFile)))
		if sb.State != manage.StateStopped {
			t.Fatalf("round %d: the killed server's sandbox is %s (%s), want stopped", i, sb.State, sb.Detail)
		}
		// Nothing is left (and New waits for nothing to go: it is gone
		// once New returns, but for zombies and loop devices the kernel
		// frees a moment later), but the sandbox's directory and its host
		// id claim, kept for its restart.
		l := settledLeftovers(p, sb.ID, uid)
		l.dir, l.claimed = false, false
		if l.any() {
			t.Errorf("round %d: the killed start left %+v after a new server started", i, l)
			for _, pid := range l.procs {
				t.Logf("  process %d: %s", pid, cmdline(pid))
			}
		}
		if p.hostIDs != nil && !startLeftovers(p, sb.ID, uid).claimed {
			t.Errorf("round %d: the stopped sandbox lost its host id claim", i)
		}
		if err := p.Resume(testCtx(t), sb.ID); err != nil {
			t.Fatalf("round %d: Resume: %v", i, err)
		}
		shOK(t, connectTo(t, p, sb.ID), "true")
		fresh := create(t, p, manage.SandboxConfig{})
		for _, id := range []string{sb.ID, fresh.ID} {
			if err := p.Kill(testCtx(t), id); err != nil {
				t.Fatalf("round %d: Kill: %v", i, err)
			}
		}
	}
}

// TestHostIDAllocationFailureLeavesNothing fills a one-id range and creates
// more sandboxes: each fails before anything started and leaves no
// directory, hidden or not, and no claim; the sandbox that holds the id
// keeps it, and once it is killed the next Create works.
func TestHostIDAllocationFailureLeavesNothing(t *testing.T) {
	testenv.RequireRoot(t)
	requireBwrap(t)
	ids := leakTestIDs()
	ids.Count = 1
	p := needBwrap(t, Config{SandboxIDs: ids})
	holder := create(t, p, manage.SandboxConfig{})
	claim := filepath.Join(p.hostIDs.dir, strconv.Itoa(ids.First))
	for i := range failedStarts() {
		var began bool
		p.startHook = func(context.Context, startStage, string) { began = true }
		_, err := p.Create(testCtx(t), manage.SandboxConfig{})
		p.startHook = nil
		if err == nil || !strings.Contains(err.Error(), "all 1 ids") || began {
			t.Fatalf("create %d: %v (daemon started: %v); want the range exhausted, before any start", i, err, began)
		}
		entries, err := os.ReadDir(p.sandboxesDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != holder.ID && e.Name() != trashDir {
				t.Errorf("create %d left %s in the sandboxes directory", i, e.Name())
			}
		}
		if got, err := os.ReadFile(claim); err != nil || !p.hostIDs.claimedBy(string(got), holder.ID) {
			t.Fatalf("create %d: the claim of id %d is %q, %v; want the first sandbox's", i, ids.First, got, err)
		}
	}
	if err := p.Kill(testCtx(t), holder.ID); err != nil {
		t.Fatal(err)
	}
	sb := create(t, p, manage.SandboxConfig{})
	shOK(t, connectTo(t, p, sb.ID), "true")
}

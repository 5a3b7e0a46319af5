//go:build linux

package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Sandboxes of a root server each get their own host id, kept across a
// restart of the server (a stopped sandbox keeps it), released when the
// sandbox is killed, and never handed to a second sandbox meanwhile.
func TestPerSandboxHostIDs(t *testing.T) {
	testenv.RequireRoot(t)
	ids := IDRange{First: 1879100000, Count: 3}
	stateDir := newStateDir(t)
	p := needBwrap(t, Config{StateDir: stateDir, SandboxIDs: ids})
	if p.hostIDs == nil || p.Capabilities().SandboxIDs != ids {
		t.Fatalf("no per-sandbox ids: %+v", p.Capabilities())
	}
	idOf := func(p *Provider, id string) int {
		t.Helper()
		uid, ok := p.hostIDs.recorded(p.dir(id))
		if !ok {
			t.Fatalf("sandbox %s records no host id", id)
		}
		return uid
	}
	a, b := create(t, p, manage.SandboxConfig{}), create(t, p, manage.SandboxConfig{})
	uidA, uidB := idOf(p, a.ID), idOf(p, b.ID)
	if uidA == uidB {
		t.Fatalf("sandboxes %s and %s share host id %d", a.ID, b.ID, uidA)
	}
	for id, uid := range map[string]int{a.ID: uidA, b.ID: uidB} {
		shOK(t, connectTo(t, p, id), "echo x > mine")
		fi, err := os.Stat(filepath.Join(p.dir(id), "workspace", "mine"))
		if err != nil || ownerUID(fi) != uid {
			t.Errorf("sandbox %s: its file belongs to %d (%v); want %d", id, ownerUID(fi), err, uid)
		}
	}

	// A new server on the same state directory: a resumed sandbox keeps its
	// id, and a new one gets neither of the two.
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	p2 := needBwrap(t, Config{StateDir: stateDir, SandboxIDs: ids})
	if err := p2.Resume(testCtx(t), a.ID); err != nil {
		t.Fatal(err)
	}
	if got := idOf(p2, a.ID); got != uidA {
		t.Errorf("resumed sandbox has host id %d; want its own %d", got, uidA)
	}
	c := create(t, p2, manage.SandboxConfig{})
	uidC := idOf(p2, c.ID)
	if uidC == uidA || uidC == uidB {
		t.Errorf("a new sandbox got host id %d, which stopped sandbox %s or running %s has", uidC, b.ID, a.ID)
	}
	// The range is used up (b is stopped but keeps its id).
	if _, err := p2.Create(testCtx(t), manage.SandboxConfig{}); err == nil {
		t.Error("Create with every id of the range taken succeeded")
	}
	// Killing b frees its id for the next sandbox.
	if err := p2.Kill(testCtx(t), b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(p2.hostIDs.dir, strconv.Itoa(uidB))); !os.IsNotExist(err) {
		t.Errorf("the killed sandbox's claim: %v; want it removed", err)
	}
	d := create(t, p2, manage.SandboxConfig{})
	if got := idOf(p2, d.ID); got != uidB {
		t.Errorf("after the kill a new sandbox got %d; want the freed %d", got, uidB)
	}
}

func TestParseIDRange(t *testing.T) {
	if r, err := ParseIDRange("200000:10"); err != nil || r != (IDRange{200000, 10}) {
		t.Errorf("ParseIDRange(200000:10) = %v, %v", r, err)
	}
	for _, bad := range []string{"", "5", "0:10", "999:1", "200000:0", "2147483647:2", "a:b"} {
		if _, err := ParseIDRange(bad); err == nil {
			t.Errorf("ParseIDRange(%q) accepted", bad)
		}
	}
}

// An unreaped zombie still counts against its uid's RLIMIT_NPROC, so a new
// sandbox is not given the id it runs as while another is free (init may
// reap a sandbox's exited bwrap late, and the next tenant would start with
// part of its process budget gone); with none other free, it is.
func TestHostIDsSkipUnreapedZombies(t *testing.T) {
	testenv.RequireRoot(t)
	const zombieUID = 1879200000
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: sandboxCred(zombieUID)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	// Not reaped until Wait: the child becomes a zombie once it exits,
	// which waitid with WNOWAIT waits for without reaping it.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}

	stateDir := newStateDir(t)
	h, err := newHostIDs(stateDir, filepath.Join(stateDir, "sandboxes"), IDRange{First: zombieUID, Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(stateDir, "sandboxes", "zombietest1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	uid, err := h.allocate(testCtx(t), "zombietest1", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.release(context.Background(), "zombietest1", dir) })
	if uid != zombieUID+1 {
		t.Fatalf("allocated host id %d while a zombie runs as %d; want %d", uid, zombieUID, zombieUID+1)
	}
	dir2 := filepath.Join(stateDir, "sandboxes", "zombietest2")
	if err := os.MkdirAll(dir2, 0o700); err != nil {
		t.Fatal(err)
	}
	uid2, err := h.allocate(testCtx(t), "zombietest2", dir2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.release(context.Background(), "zombietest2", dir2) })
	if uid2 != zombieUID {
		t.Fatalf("with the range otherwise taken, allocated host id %d; want the zombie's %d", uid2, zombieUID)
	}
}

// TestProcessIDsSeeOtherUsers checks that the scan behind the host-id
// allocation sees a process another user runs with a uid and a gid of the
// range (distinct ones, so each is found on its own line).
func TestProcessIDsSeeOtherUsers(t *testing.T) {
	testenv.RequireRoot(t)
	const uid, gid = 1879300001, 1879300002
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	live, all := processIDs()
	for _, id := range []int{uid, gid, os.Getuid(), os.Getgid()} {
		if !live[id] || !all[id] {
			t.Errorf("id %d of a running process: live %v, all %v; want both", id, live[id], all[id])
		}
	}
}

// TestReadSmallFileGrows checks that a file longer than the buffer is read
// whole.
func TestReadSmallFileGrows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	want := make([]byte, 5000)
	for i := range want {
		want[i] = byte('a' + i%26)
	}
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	got, _, err := readSmallFile(path, make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("read %d bytes, want the %d written", len(got), len(want))
	}
}

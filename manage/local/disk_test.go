//go:build linux

package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// A root server's bwrap sandbox keeps its files on its own image: mounted
// while it runs, unmounted when it stops, mounted again (files kept) when
// it resumes, deleted with it.
func TestDiskImageLifecycle(t *testing.T) {
	testenv.RequireRoot(t)
	state := newStateDir(t)
	p := needBwrap(t, Config{StateDir: state, Disk: 32 << 20})
	if p.disk == nil {
		testenv.Missing(t, "a disk quota here (%s): loop devices, mkfs.ext4, mount", p.diskWhy)
	}
	sb := create(t, p, manage.SandboxConfig{})
	dir := p.dir(sb.ID)
	vol := filepath.Join(dir, volumeDir)
	if !hasDisk(dir) || !mounted(dir, vol) {
		t.Fatalf("sandbox %s: disk image %v, mounted %v", sb.ID, hasDisk(dir), mounted(dir, vol))
	}
	c := connectTo(t, p, sb.ID)
	shOK(t, c, "echo kept > f")
	if out := shFails(t, c, "head -c 40000000 /dev/zero > big"); !strings.Contains(out, "No space left") {
		t.Errorf("writing past the quota: %q; want ENOSPC", out)
	}
	for _, w := range sb.Warnings {
		if strings.Contains(w, "Disk use is NOT bounded") {
			t.Errorf("warning on a sandbox with a quota: %q", w)
		}
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if mounted(dir, vol) {
		t.Error("a stopped sandbox's image is still mounted")
	}
	p2 := needBwrap(t, Config{StateDir: state, Disk: 32 << 20})
	if err := p2.Resume(testCtx(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := shOK(t, connectTo(t, p2, sb.ID), "cat f"); got != "kept" {
		t.Errorf("after resume: %q; want the file kept", got)
	}
	if err := p2.Kill(testCtx(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("killed sandbox's directory: %v", err)
	}
	data, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(data), sb.ID) {
		t.Errorf("a mount of the killed sandbox is left:\n%s", data)
	}
}

// Without a quota (an unprivileged server, or turned off) every bwrap
// Sandbox says its disk use is not bounded.
func TestNoDiskQuotaIsSaid(t *testing.T) {
	p := needBwrap(t, Config{Disk: -1})
	sb := create(t, p, manage.SandboxConfig{})
	found := false
	for _, w := range sb.Warnings {
		found = found || strings.Contains(w, "Disk use is NOT bounded")
	}
	if !found {
		t.Errorf("warnings %q; want one saying disk use is not bounded", sb.Warnings)
	}
}

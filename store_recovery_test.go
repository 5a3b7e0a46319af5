//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore/boltstoretest"
)

// rebuiltNotice is the notice a workspace's first result
// carries after the store was rebuilt with its sandbox recovered.
const rebuiltNotice = "The server's state file was damaged and rebuilt from the sandboxes the provider still has; this workspace's sandbox and its files were recovered."

// A state.db moved aside as damaged used to make every workspace silently
// come back empty, its old sandbox directory orphaned on disk. Now the
// records are rebuilt from the sandbox directories (each one's sandbox.json
// names its workspace), the workspace comes back with its files, and its
// first result says so, once.
func TestDamagedStateDBIsRebuilt(t *testing.T) {
	for _, how := range boltstoretest.Kinds {
		t.Run(how, func(t *testing.T) {
			n := newNewcomer(t)
			n.mustRun(`./sandbox-mcp call --workspace keep put_files '{"files": [{"path": "kept.txt", "content": "still here"}]}'`)
			n.mustRun(`./sandbox-mcp call --workspace other put_files '{"files": [{"path": "o.txt", "content": "other"}]}'`)
			db := filepath.Join(n.dir, "state", "state.db")
			if fi, err := os.Stat(db); err != nil || fi.Size() <= 8192 {
				t.Fatalf("state.db: %v, %v; want more than 8192 bytes", fi, err)
			}
			boltstoretest.Damage(t, filepath.Dir(db), how)
			out, errs, code := n.run(`./sandbox-mcp call --workspace keep read_files '{"paths": ["kept.txt"]}'`, nil)
			if code != 0 {
				t.Fatalf("first call after the damage: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
			}
			if !strings.Contains(out, "still here") {
				t.Errorf("first call after the damage did not find the file:\n%s\nstderr: %s", out, errs)
			}
			if strings.Count(out, "NOTICE: "+rebuiltNotice) != 1 {
				t.Errorf("first call after the damage: want the rebuild notice once:\n%s", out)
			}
			if aside, _ := filepath.Glob(db + ".corrupt-*"); len(aside) != 1 {
				t.Errorf("state.db not moved aside: %v", aside)
			}
			if _, err := os.Stat(db + ".rebuild-pending"); !os.IsNotExist(err) {
				t.Errorf("after the rebuild, its pending mark: %v; want it removed", err)
			}
			out = n.mustRun(`./sandbox-mcp call --workspace keep read_files '{"paths": ["kept.txt"]}'`)
			if !strings.Contains(out, "still here") || strings.Contains(out, "damaged") {
				t.Errorf("second call: want the file and no notice:\n%s", out)
			}
			// The other workspace was recovered too, and hears of it once.
			out = n.mustRun(`./sandbox-mcp call --workspace other read_files '{"paths": ["o.txt"]}'`)
			if !strings.Contains(out, "other") || strings.Count(out, "NOTICE: "+rebuiltNotice) != 1 {
				t.Errorf("other workspace after the rebuild:\n%s", out)
			}
			sandboxes, _ := filepath.Glob(filepath.Join(n.dir, "state", "sandboxes", "l*"))
			if len(sandboxes) != 2 {
				t.Errorf("sandbox directories after the rebuild: %v; want the two workspaces' only", sandboxes)
			}
		})
	}
}

// A sandbox directory the rebuild cannot attribute (its sandbox.json is
// gone) is left in place and logged, never deleted; a named workspace
// whose sandbox was not found hears that its files from before are lost.
func TestDamagedStateDBOrphanLeftInPlace(t *testing.T) {
	n := newNewcomer(t)
	n.mustRun(`./sandbox-mcp call --workspace keep put_files '{"files": [{"path": "kept.txt", "content": "x"}]}'`)
	sandboxes, _ := filepath.Glob(filepath.Join(n.dir, "state", "sandboxes", "l*"))
	if len(sandboxes) != 1 {
		t.Fatalf("sandbox directories: %v", sandboxes)
	}
	if err := os.Remove(filepath.Join(sandboxes[0], "sandbox.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(n.dir, "state", "state.db"), 0); err != nil {
		t.Fatal(err)
	}
	out, errs, code := n.run(`./sandbox-mcp call --workspace keep workspace_info`, nil)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "cannot be attributed") {
		t.Errorf("stderr does not log the orphan:\n%s", errs)
	}
	if !strings.Contains(out, "no sandbox of this workspace was found: this is a new, empty sandbox") {
		t.Errorf("the workspace is not told its files are lost:\n%s", out)
	}
	// As root the workspace lives in the sandbox's disk image, unmounted
	// while no daemon runs; else in the directory itself.
	_, errFile := os.Stat(filepath.Join(sandboxes[0], "workspace", "kept.txt"))
	_, errImage := os.Stat(filepath.Join(sandboxes[0], "disk.img"))
	if errFile != nil && errImage != nil {
		t.Errorf("the orphan's files: %v, and no disk image (%v); want them left in place", errFile, errImage)
	}
}

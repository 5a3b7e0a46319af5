//go:build linux

package tools

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// The artifact store is private to the server's user: after collect_outputs
// every directory in it is 0700 and every file 0600 (0700 when it was
// executable), whatever the modes were in the sandbox, and a store an older
// version left open (0755) is closed when the tools start. Staged back, an
// artifact gets the usual modes.
func TestArtifactStoreIsPrivate(t *testing.T) {
	art := filepath.Join(t.TempDir(), "artifacts")
	// What an older version left: the store and a workspace's directory
	// open to everyone.
	old := filepath.Join(art, "0123456789abcdef-old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(art, 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOptions{config: Config{ArtifactsDir: art}})
	for _, dir := range []string{art, old} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s after start = %v, %v; want 0700", dir, fi.Mode(), err)
		}
	}

	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": "out/public.txt", "content": "p", "mode": "0644"},
		{"path": "out/world-writable.txt", "content": "w", "mode": "0666"},
		{"path": "out/deep/er/tool.sh", "content": "#!/bin/sh\n", "mode": "0755"},
		{"path": "out/secret.txt", "content": "s", "mode": "0600"},
	}}, nil)
	out, _ := okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"out/**"}})
	if len(out.Artifacts) != 4 {
		t.Fatalf("collected %+v", out.Artifacts)
	}
	seen := 0
	err := filepath.WalkDir(art, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		seen++
		want := fs.FileMode(0o600)
		switch {
		case fi.IsDir():
			want = 0o700
		case filepath.Base(p) == "tool.sh":
			want = 0o700
		case !fi.Mode().IsRegular():
			t.Errorf("%s is a %v in the artifact store", p, fi.Mode().Type())
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v; want %v", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 9 {
		t.Fatalf("walked %d paths under the artifact store; want the store, 2 workspaces, 3 directories and 4 files", seen)
	}

	st, _ := okAs[stageInputsOutput](h, "stage_inputs", map[string]any{"inputs": []map[string]any{{"from": "artifact://out", "to": "back"}}})
	if len(st.Staged) != 1 || st.Staged[0].Files != 4 {
		t.Fatalf("staged %+v", st.Staged)
	}
	for name, want := range map[string]uint32{"back/public.txt": 0o644, "back/world-writable.txt": 0o644, "back/deep/er/tool.sh": 0o755, "back/secret.txt": 0o644} {
		if e, err := h.sbStat(name); err != nil || e.Mode != want {
			t.Errorf("staged %s = %+v, %v; want mode %o", name, e, err, want)
		}
	}
}

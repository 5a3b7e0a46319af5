package contentfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Write names the file by its content, leaves no temporary file, and a
// second Write of the same content lands on the same path.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	got, err := Write(dir, "bin-", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	// SHA-256("hello") starts 2cf24dba5fb0a30e.
	if want := filepath.Join(dir, "bin-2cf24dba5fb0a30e"); got != want {
		t.Errorf("Write = %s, want %s", got, want)
	}
	fi, err := os.Stat(got)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode().Perm())
	}
	again, err := Write(dir, "bin-", strings.NewReader("hello"))
	if err != nil || again != got {
		t.Errorf("second Write = %s, %v; want %s", again, err, got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want 1 (no temporary file left)", len(entries))
	}
}

// A directory Write cannot create in is an error, and nothing is left.
func TestWriteMissingDir(t *testing.T) {
	if _, err := Write(filepath.Join(t.TempDir(), "missing"), "bin-", strings.NewReader("x")); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
}

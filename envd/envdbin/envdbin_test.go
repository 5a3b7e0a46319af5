//go:build linux

package envdbin_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// TestEmbeddedEnvdIsCurrent rebuilds each embedded lean envd from this tree
// exactly as `make envd` does and requires the same bytes: a binary built
// from this tree must not carry an envd from an older one. Without an
// embedded envd for this machine (a tree built without make) it skips, or
// fails under CI=true, where scripts/test builds it first.
func TestEmbeddedEnvdIsCurrent(t *testing.T) {
	if envdbin.Lookup(runtime.GOARCH) == nil {
		msg := "no embedded lean envd for linux/" + runtime.GOARCH + ": run make envd"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		e := envdbin.Lookup(arch)
		if e == nil {
			t.Logf("no embedded envd for %s", arch)
			continue
		}
		if e.Name != envdbin.Name(arch) || len(e.SHA256) != 64 {
			t.Errorf("Lookup(%s): name %q, hash %q", arch, e.Name, e.SHA256)
		}
		if again := envdbin.Lookup(arch); again != e {
			t.Errorf("Lookup(%s) hashed again", arch)
		}
		out := filepath.Join(t.TempDir(), e.Name)
		if err := envdtest.BuildLean(out, arch); err != nil {
			t.Fatal(err)
		}
		fresh, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, e.Data) {
			t.Errorf("the embedded %s (%d bytes) differs from a fresh build of this tree (%d bytes): run make envd", e.Name, len(e.Data), len(fresh))
		}
	}
}

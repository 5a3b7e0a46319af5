//go:build linux

package envdclient_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// WalkDir in pages of any size gives what one ListDir gives, in the same
// order, and stops fetching when told to.
func TestWalkDirPages(t *testing.T) {
	d := envdtest.Serve(t, "unix", daemon.Config{})
	c := newClient(t, d.Endpoint)
	ctx := t.Context()
	for _, p := range []string{"t/a/x", "t/a/y/z", "t/a-b", "t/a.c/q", "t/b", "t/c/d/e/f", "t/c/g"} {
		full := filepath.Join(d.Root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for depth := uint32(1); depth <= 5; depth++ {
		whole, err := c.ListDir(ctx, "t", depth)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range whole {
			want = append(want, e.Path)
		}
		for _, page := range []int{1, 2, 3, 100} {
			t.Run(fmt.Sprintf("depth %d page %d", depth, page), func(t *testing.T) {
				defer envdclient.SetWalkPageEntries(page)()
				var got []string
				if err := c.WalkDir(ctx, "t", depth, func(e envdclient.Entry) error {
					got = append(got, e.Path)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("WalkDir = %q\nListDir = %q", got, want)
				}
			})
		}
	}

	defer envdclient.SetWalkPageEntries(2)()
	var seen int
	if err := c.WalkDir(ctx, "t", 5, func(envdclient.Entry) error {
		if seen++; seen == 3 {
			return envdclient.ErrStopWalk
		}
		return nil
	}); err != nil || seen != 3 {
		t.Errorf("stopped walk: %d entries seen, %v; want 3, nil", seen, err)
	}
	boom := errors.New("boom")
	if err := c.WalkDir(ctx, "t", 5, func(envdclient.Entry) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("callback error = %v; want it returned", err)
	}
	if err := c.WalkDir(ctx, "nope", 1, func(envdclient.Entry) error { return nil }); !envdclient.IsNotFound(err) {
		t.Errorf("missing directory = %v; want not found", err)
	}
}

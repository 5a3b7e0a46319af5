package envdbin_test

import (
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
)

func TestLookupMissing(t *testing.T) {
	if e := envdbin.Lookup("no-such-arch"); e != nil {
		t.Errorf("Lookup(no-such-arch) = %s", e.Name)
	}
}

// TestList checks that List gives each embedded envd once, by name, as
// Lookup does.
func TestList(t *testing.T) {
	all := envdbin.List()
	for i, e := range all {
		if i > 0 && all[i-1].Name >= e.Name {
			t.Errorf("List is not sorted by name: %s before %s", all[i-1].Name, e.Name)
		}
		goarch := e.Name[len(envdbin.Name("")):]
		if got := envdbin.Lookup(goarch); got != e {
			t.Errorf("List gives %s, Lookup(%s) gives %v", e.Name, goarch, got)
		}
	}
	t.Logf("%d embedded envds", len(all))
}

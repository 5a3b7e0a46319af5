package manage_test

import (
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Of several sandboxes found for one key, the highest generation is the
// workspace's (the later created on a tie); the others lose their key and
// are returned; unattributed entries and other keys are left alone.
func TestKeepNewestGeneration(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	entry := func(id, key string, gen int64, created time.Time) manage.Rediscovered {
		return manage.Rediscovered{Sandbox: manage.Sandbox{ID: id, CreatedAt: created}, Key: key, Generation: gen}
	}
	found := []manage.Rediscovered{
		entry("a2", "a", 2, t0),
		entry("a3", "a", 3, t0.Add(-time.Hour)), // newer generation, made earlier
		entry("a1", "a", 1, t0.Add(time.Hour)),
		entry("b-early", "b", 1, t0),
		entry("b-late", "b", 1, t0.Add(time.Minute)),
		entry("c", "c", 1, t0),
		entry("x", "", 0, t0),
	}
	orphans := manage.KeepNewestGeneration(found)
	keys := map[string]string{}
	for _, r := range found {
		keys[r.Sandbox.ID] = r.Key
	}
	want := map[string]string{"a2": "", "a3": "a", "a1": "", "b-early": "", "b-late": "b", "c": "c", "x": ""}
	for id, k := range want {
		if keys[id] != k {
			t.Errorf("%s: key %q; want %q", id, keys[id], k)
		}
	}
	got := map[string]bool{}
	for _, o := range orphans {
		got[o.Sandbox.ID] = true
		if o.Key == "" {
			t.Errorf("orphan %s returned without its key", o.Sandbox.ID)
		}
	}
	if len(orphans) != 3 || !got["a2"] || !got["a1"] || !got["b-early"] {
		t.Errorf("orphans %v; want a2, a1 and b-early", got)
	}
}

package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test would have ended instead
// of ending it.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) { r.skipped = fmt.Sprintf(format, args...) }

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestMissingSkipsLocally(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	Missing(r, "no %s here: install it", "widget")
	if r.failed != "" || !strings.Contains(r.skipped, "no widget here: install it") {
		t.Errorf("skipped %q, failed %q; want a skip naming the missing part", r.skipped, r.failed)
	}
	if IsCI() {
		t.Error("IsCI with CI empty")
	}
}

func TestMissingFailsUnderCI(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	Missing(r, "no %s here: install it", "widget")
	if r.skipped != "" || !strings.Contains(r.failed, "no widget here: install it") || !strings.Contains(r.failed, "CI=true") {
		t.Errorf("skipped %q, failed %q; want a failure naming the missing part and CI=true", r.skipped, r.failed)
	}
	if !IsCI() {
		t.Error("IsCI with CI=true is false")
	}
}

// Only CI=true counts, as the project's CI sets it.
func TestOtherCIValuesSkip(t *testing.T) {
	for _, v := range []string{"", "false", "1"} {
		t.Setenv("CI", v)
		if IsCI() {
			t.Errorf("IsCI with CI=%q", v)
		}
	}
}

func TestRequireRoot(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	RequireRoot(r)
	if root := os.Geteuid() == 0; root != (r.skipped == "") || r.failed != "" {
		t.Errorf("as uid %d: skipped %q, failed %q", os.Geteuid(), r.skipped, r.failed)
	}
}

func TestRequireUser(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	if u := RequireUser(r, "no-such-user-for-testenv"); u != nil || !strings.Contains(r.failed, "no-such-user-for-testenv") {
		t.Errorf("RequireUser of an unknown user = %v, failed %q", u, r.failed)
	}
	r = &recorder{TB: t}
	if u := RequireUser(r, "root"); u == nil || u.Uid != "0" || r.failed != "" {
		t.Errorf("RequireUser(root) = %v, failed %q", u, r.failed)
	}
}

// Package testenv is the one policy for tests that need a part of the
// machine that may be missing: root, a working bubblewrap, cgroups, a
// system user, a command on PATH, a kernel feature, the built sandbox-mcp
// binary.
//
// The policy: on a developer's machine such a test says SKIP, naming what is
// missing and how to get it, so the rest of the suite still runs there.
// Under CI=true (the project's CI, and anyone who wants the whole suite to
// count) every part must be present, so the same test fails instead: a
// missing part never turns into a silently skipped test in CI.
//
// Every test that needs such a part goes through [Missing] or one of the
// probes built on it ([RequireRoot], [RequireUser]); a probe only one
// package can make (a working bubblewrap and cgroups through
// manage/local's Probe, the built binary through envd/envdtest) lives there
// and ends the test with [Missing].
//
// A skip that is not about a missing part (a -short run, a helper test that
// only runs when another test starts it) stays a plain t.Skip with a comment
// saying so.
package testenv

import (
	"fmt"
	"os"
	"os/user"
	"testing"
)

// IsCI reports whether the tests run under CI=true, where every part a test
// needs must be present.
func IsCI() bool {
	return os.Getenv("CI") == "true"
}

// Missing ends t because a part it needs is missing: a skip, or under
// CI=true a failure. The message (format and args) names the part and how
// to get it.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if IsCI() {
		t.Fatalf("missing: %s (CI=true: a test that needs a missing part fails)", msg)
		return
	}
	t.Skipf("missing: %s (CI=true would fail this test)", msg)
}

// RequireRoot ends t through [Missing] unless the tests run as root
// (effective uid 0).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root (the tests run as uid %d): run them as root, e.g. sudo -E go test", os.Geteuid())
	}
}

// RequireUser returns the system user name, ending t through [Missing] when
// the machine has no such user.
func RequireUser(t testing.TB, name string) *user.User {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		Missing(t, "this test needs the system user %q (%v): create it, e.g. useradd --system %s", name, err, name)
		return nil
	}
	return u
}

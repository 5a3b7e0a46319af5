//go:build linux

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDoctor(t *testing.T) {
	n := newNewcomer(t)
	out, errs, code := n.run("./sandbox-mcp doctor", nil)
	if code != 0 || !strings.Contains(out, "isolation (bubblewrap)") || !strings.Contains(out, "state directory") {
		t.Fatalf("doctor: exit %d\n%s%s", code, out, errs)
	}
	// A half-configured machine: an impossible state dir fails, never crashes.
	out, errs, code = n.run("./sandbox-mcp doctor --json --state-dir /proc/no/such/dir", nil)
	var rep struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Name, Status, Fix string
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.OK {
		t.Fatalf("doctor with a bad state dir: exit %d, %v\n%s%s", code, err, out, errs)
	}
	for _, c := range rep.Checks {
		if c.Status == "fail" && c.Fix == "" {
			t.Errorf("failing check %s has no fix", c.Name)
		}
	}
	// A provider this version does not have fails, and so does e2b without
	// an API key.
	if _, _, code := n.run("./sandbox-mcp doctor --provider nosuch", nil); code != 1 {
		t.Errorf("doctor --provider nosuch: exit %d, want 1", code)
	}
	if out, _, code := n.run("E2B_API_KEY= ./sandbox-mcp doctor --provider e2b", nil); code != 1 || !strings.Contains(out, "no API key") {
		t.Errorf("doctor --provider e2b without a key: exit %d, want 1\n%s", code, out)
	}
}

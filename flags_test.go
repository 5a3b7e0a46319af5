//go:build linux

package main

import (
	"math"
	"strings"
	"testing"
)

func TestByteSizes(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "32KiB": 32 << 10, "1MiB": 1 << 20, "2GiB": 2 << 30, "64MB": 64e6, "1kB": 1000, "7B": 7} {
		got, err := parseBytes(in)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "12XB", "1.5MiB", "MiB",
		// Overflow int64 once multiplied.
		"9223372036854775807KiB", "8589934592GiB", "9223372036854775808"} {
		if n, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", bad, n)
		}
	}
	// The largest sizes that fit.
	for in, want := range map[string]int64{"9223372036854775807": math.MaxInt64, "8589934591GiB": 8589934591 << 30, "9223372036854775KB": 9223372036854775000} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

func TestEnvironmentFlags(t *testing.T) {
	n := newNewcomer(t)
	n.env = append(n.env, "SANDBOX_MCP_MAX_TIMEOUT=1s")
	out := n.mustRun(`./sandbox-mcp call workspace_exec '{"command": "true", "timeout_sec": 5}'`)
	if !strings.Contains(out, "clamped to the server's ceiling of 1 s") {
		t.Fatalf("SANDBOX_MCP_MAX_TIMEOUT not applied: %q", out)
	}
	_, errs, code := n.run(`SANDBOX_MCP_OUTPUT_LIMIT=lots ./sandbox-mcp call workspace_info`, nil)
	if code != 2 || !strings.Contains(errs, "SANDBOX_MCP_OUTPUT_LIMIT") {
		t.Fatalf("a bad environment value: exit %d %q", code, errs)
	}
}

// --disk takes a size or off; off is no quota for every provider.
func TestDiskSize(t *testing.T) {
	var d diskSize
	if err := d.Set("off"); err != nil || d != diskOff || d.String() != "off" || d.bytes() != 0 {
		t.Errorf("--disk off: %d %q %d, %v; want -1, off, 0 bytes", d, d.String(), d.bytes(), err)
	}
	if err := d.Set("64MiB"); err != nil || d.bytes() != 64<<20 || d.String() != "64MiB" {
		t.Errorf("--disk 64MiB: %d %q, %v", d, d.String(), err)
	}
	if err := d.Set("-1"); err == nil {
		t.Error("--disk -1 accepted; want an error")
	}
}

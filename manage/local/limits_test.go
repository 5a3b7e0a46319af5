//go:build linux

package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

func TestLimits(t *testing.T) {
	lim := manage.Limits{MemoryBytes: 256 << 20, Pids: 200, NoFile: 1234, CPUs: 0.5}
	t.Run("bwrap", func(t *testing.T) {
		p := needBwrap(t, Config{})
		sb := create(t, p, manage.SandboxConfig{Limits: lim})
		c := connectTo(t, p, sb.ID)
		if got := shOK(t, c, "ulimit -n; ulimit -Hn; ulimit -p"); got != "1234\n1234\n200" {
			t.Errorf("ulimit -n, -Hn, -p inside: %q, want 1234 1234 200", got)
		}
		checkCgroupLimits(t, p, sb.ID, lim)

		// The defaults: 4096 processes, 65536 files, half the RAM, capped
		// at the server's own hard limits when it may not raise them.
		def := create(t, p, manage.SandboxConfig{})
		nofile, pids := capped(t, 65536, unix.RLIMIT_NOFILE), capped(t, 4096, unix.RLIMIT_NPROC)
		if got := shOK(t, connectTo(t, p, def.ID), "ulimit -n; ulimit -p"); got != fmt.Sprintf("%d\n%d", nofile, pids) {
			t.Errorf("default ulimit -n, -p: %q, want %d %d", got, nofile, pids)
		}
		checkCgroupLimits(t, p, def.ID, manage.Limits{MemoryBytes: halfRAM(t), Pids: int64(pids)})
	})
	t.Run("bwrap as the server's uid", func(t *testing.T) {
		// HostUID -1: no unprivileged host user, so rlimits are set with
		// prlimit(2) on the sandbox's first process (same uid).
		p := needBwrap(t, Config{HostUID: -1, HostGID: -1})
		sb := create(t, p, manage.SandboxConfig{Limits: lim})
		if got := shOK(t, connectTo(t, p, sb.ID), "ulimit -n; ulimit -Hn; ulimit -p"); got != "1234\n1234\n200" {
			t.Errorf("ulimit -n, -Hn, -p inside: %q, want 1234 1234 200", got)
		}
		checkCgroupLimits(t, p, sb.ID, lim)
	})
	t.Run("none", func(t *testing.T) {
		p := newProvider(t, Config{Isolation: IsolationNone})
		sb := create(t, p, manage.SandboxConfig{Limits: lim})
		if got := shOK(t, connectTo(t, p, sb.ID), "ulimit -n; ulimit -Hn"); got != "1234\n1234" {
			t.Errorf("ulimit -n, -Hn inside: %q, want 1234 1234", got)
		}
		checkCgroupLimits(t, p, sb.ID, lim)
	})
}

// capped is def, or the server's hard limit of resource when that is lower
// and the server may not raise it.
func capped(t *testing.T, def uint64, resource int) uint64 {
	t.Helper()
	if hasCapability(unix.CAP_SYS_RESOURCE) {
		return def
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(resource, &lim); err != nil {
		t.Fatal(err)
	}
	return min(def, lim.Max)
}

// halfRAM is half of MemTotal in /proc/meminfo, rounded down to pages.
func halfRAM(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("MemTotal: %q: %v", rest, err)
			}
			page := int64(os.Getpagesize())
			return kb * 1024 / 2 / page * page
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// checkCgroupLimits reads back the limits in the sandbox's cgroup.
func checkCgroupLimits(t *testing.T, p *Provider, id string, lim manage.Limits) {
	t.Helper()
	cg := p.cgroups
	if cg == nil {
		testenv.Missing(t, "cgroups (%s): run the tests as root, or in a delegated cgroup v2 subtree; sandbox-mcp doctor names the fix", p.Capabilities().CgroupError)
		return
	}
	type knob struct{ file, want string }
	var knobs []knob
	if cg.version == 1 {
		if cg.memory {
			knobs = append(knobs, knob{filepath.Join(cg.v1["memory"], id, "memory.limit_in_bytes"), fmt.Sprint(lim.MemoryBytes)})
		}
		if cg.pids {
			knobs = append(knobs, knob{filepath.Join(cg.v1["pids"], id, "pids.max"), fmt.Sprint(lim.Pids)})
		}
		if cg.cpu && lim.CPUs > 0 {
			knobs = append(knobs, knob{filepath.Join(cg.v1["cpu"], id, "cpu.cfs_quota_us"), fmt.Sprint(int64(lim.CPUs * 100000))})
		}
	} else {
		dir := filepath.Join(cg.v2, id)
		if cg.memory {
			knobs = append(knobs, knob{filepath.Join(dir, "memory.max"), fmt.Sprint(lim.MemoryBytes)})
		}
		if cg.pids {
			knobs = append(knobs, knob{filepath.Join(dir, "pids.max"), fmt.Sprint(lim.Pids)})
		}
		if cg.cpu && lim.CPUs > 0 {
			knobs = append(knobs, knob{filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d 100000", int64(lim.CPUs*100000))})
		}
	}
	if len(knobs) == 0 {
		testenv.Missing(t, "a cgroup controller with limits (memory, pids or cpu): run the tests as root, or in a delegated cgroup v2 subtree; sandbox-mcp doctor names the fix")
	}
	for _, k := range knobs {
		if got := readTrim(k.file); got != k.want {
			t.Errorf("%s = %q, want %q", k.file, got, k.want)
		}
	}
}

//go:build linux

package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

func byName(checks []Check) map[string]Check {
	m := map[string]Check{}
	for _, c := range checks {
		m[c.Name] = c
	}
	return m
}

var localNames = []string{"isolation (bubblewrap)", "user namespaces", "cgroups (limits and pause)"}

func TestLocalVerdicts(t *testing.T) {
	nothing := local.Capabilities{BwrapError: "bwrap: missing", CgroupError: "no delegation"}
	broken := local.Capabilities{BwrapPath: "/usr/bin/bwrap", BwrapVersion: "bubblewrap 0.8.0", BwrapError: "setting up uid map: Permission denied"}
	all := local.Capabilities{BwrapPath: "/usr/bin/bwrap", BwrapVersion: "bubblewrap 0.8.0", BwrapUsable: true, UserNamespaces: true,
		CgroupVersion: 2, Freezer: true, MemoryLimit: true, PidsLimit: true, CPULimit: true}
	rootOnly := all
	rootOnly.DropError, rootOnly.Freezer, rootOnly.CPULimit = "bwrap: cannot reach /state", false, false
	for _, tc := range []struct {
		name      string
		cfg       Config
		caps      local.Capabilities
		want      [3]Status // isolation, user namespaces, cgroups
		cgroupHas string
	}{
		{"nothing/local", Config{Provider: "local", Isolation: "auto"}, nothing, [3]Status{Warn, Warn, Warn}, ""},
		{"nothing/default provider", Config{}, nothing, [3]Status{Warn, Warn, Warn}, ""},
		{"nothing/local bwrap", Config{Provider: "local", Isolation: "bwrap"}, nothing, [3]Status{Fail, Warn, Warn}, ""},
		{"broken/local bwrap", Config{Provider: "local", Isolation: "bwrap"}, broken, [3]Status{Fail, Warn, Warn}, ""},
		{"nothing/docker", Config{Provider: "docker", Isolation: "bwrap"}, nothing, [3]Status{Skip, Skip, Skip}, ""},
		{"nothing/e2b", Config{Provider: "e2b"}, nothing, [3]Status{Skip, Skip, Skip}, ""},
		{"all/local", Config{Provider: "local"}, all, [3]Status{OK, OK, OK}, "cgroup v2 with cpu, freezer, memory, pids"},
		{"all/docker", Config{Provider: "docker"}, all, [3]Status{OK, OK, OK}, "cgroup v2 with cpu, freezer, memory, pids"},
		{"root only/local", Config{Provider: "local"}, rootOnly, [3]Status{Warn, OK, Warn}, "cgroup v2 with memory, pids; no freezer"},
		{"root only/docker", Config{Provider: "docker"}, rootOnly, [3]Status{Skip, OK, Skip}, "cgroup v2 with memory, pids; no freezer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks := localVerdicts(tc.cfg, tc.caps)
			if len(checks) != len(localNames) {
				t.Fatalf("checks = %+v", checks)
			}
			for i, c := range checks {
				if c.Name != localNames[i] || c.Status != tc.want[i] {
					t.Errorf("check %d = %q %s (%s); want %q %s", i, c.Name, c.Status, c.Detail, localNames[i], tc.want[i])
				}
				if c.Status == Skip && !strings.Contains(c.Detail, "--provider local") {
					t.Errorf("skipped %q does not say what needs it: %s", c.Name, c.Detail)
				}
				if (c.Status == Warn || c.Status == Fail) && c.Fix == "" {
					t.Errorf("%s %q has no fix", c.Status, c.Name)
				}
			}
			if tc.cgroupHas != "" && !strings.HasPrefix(checks[2].Detail, tc.cgroupHas) {
				t.Errorf("cgroups detail = %q; want it to start with %q", checks[2].Detail, tc.cgroupHas)
			}
		})
	}
}

// Run on this machine, whatever it has: what the configured provider does not
// need never warns or fails, and a state directory that cannot be made fails.
func TestRun(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	t.Setenv("E2B_API_KEY", "")
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("docker, bad state dir", func(t *testing.T) {
		rep := Run(t.Context(), Config{Provider: "docker", Isolation: "auto", StateDir: filepath.Join(file, "state"), Version: "v-test", EnvdVersion: "0.6.4"})
		checks := byName(rep.Checks)
		if c := checks["state directory"]; c.Status != Fail || c.Fix == "" || !strings.Contains(c.Detail, file) {
			t.Errorf("state directory = %+v; want a failure naming it, with a fix", c)
		}
		if c := checks["artifact store"]; c.Status != Skip {
			t.Errorf("artifact store without a directory = %+v; want skip", c)
		}
		for _, name := range localNames {
			if c, ok := checks[name]; !ok || (c.Status != OK && c.Status != Skip) {
				t.Errorf("%s for --provider docker = %+v (present %v); want ok or skip", name, c, ok)
			}
		}
		if c := checks["docker engine"]; c.Status != Fail {
			t.Errorf("unreachable docker for --provider docker = %+v; want fail", c)
		}
		if c := checks["e2b api"]; c.Status != Skip {
			t.Errorf("e2b api without a key for --provider docker = %+v; want skip", c)
		}
		if c, ok := checks["provider"]; ok {
			t.Errorf("provider check for docker = %+v; want none (docker is implemented)", c)
		}
		if c := checks["versions"]; c.Status != OK || !strings.Contains(c.Detail, "v-test") || !strings.Contains(c.Detail, "0.6.4") {
			t.Errorf("versions = %+v", c)
		}
		if rep.OK() {
			t.Error("report with failures is OK")
		}
	})

	t.Run("local", func(t *testing.T) {
		state := t.TempDir()
		rep := Run(t.Context(), Config{Provider: "local", Isolation: "auto", StateDir: state, ArtifactsDir: filepath.Join(state, "artifacts")})
		checks := byName(rep.Checks)
		for _, name := range []string{"state directory", "artifact store"} {
			if c := checks[name]; c.Status != OK {
				t.Errorf("%s = %+v; want ok", name, c)
			}
		}
		for _, name := range localNames {
			if c, ok := checks[name]; !ok || c.Status == Skip || c.Status == Fail {
				t.Errorf("%s for --provider local, --isolation auto = %+v (present %v); want ok or warn", name, c, ok)
			}
		}
		for _, name := range []string{"docker engine", "e2b api"} {
			if c := checks[name]; c.Status != Skip {
				t.Errorf("%s for --provider local = %+v; want skip", name, c)
			}
		}
		if c, ok := checks["provider"]; ok {
			t.Errorf("provider check for local = %+v; want none", c)
		}
		if !rep.OK() {
			t.Errorf("report for a working local setup is not OK: %+v", rep.Checks)
		}
	})
}

//go:build linux

package local

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOwnDir(t *testing.T) {
	for _, tc := range []struct {
		mnt  cgroupMount
		own  string
		want string
	}{
		{cgroupMount{dir: "/sys/fs/cgroup", root: "/"}, "/system.slice/x.service", "/sys/fs/cgroup/system.slice/x.service"},
		{cgroupMount{dir: "/sys/fs/cgroup", root: "/"}, "/", "/sys/fs/cgroup"},
		// A mount showing part of the hierarchy (a container's).
		{cgroupMount{dir: "/sys/fs/cgroup/memory", root: "/docker/abc"}, "/docker/abc/inner", "/sys/fs/cgroup/memory/inner"},
		{cgroupMount{dir: "/sys/fs/cgroup/memory", root: "/docker/abc"}, "/elsewhere", ""},
		{cgroupMount{dir: "/sys/fs/cgroup", root: "/"}, "/a/../../etc", ""},
		{cgroupMount{dir: "/sys/fs/cgroup", root: "/"}, "", ""},
	} {
		if got := ownDir(tc.mnt, tc.own); got != tc.want {
			t.Errorf("ownDir(%+v, %q) = %q; want %q", tc.mnt, tc.own, got, tc.want)
		}
	}
}

// Sandbox cgroups live under the server's own cgroup where it may create
// them, so limits on the service bind its sandboxes.
func TestCgroupsUnderOwnCgroup(t *testing.T) {
	requireBwrap(t)
	p := newProvider(t, Config{})
	if p.cgroups == nil {
		t.Skip("no cgroups here (" + p.caps.CgroupError + "): nothing to nest")
	}
	own := ownCgroups()
	mounts, err := readCgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	if p.cgroups.version == 2 {
		dirs = []string{p.cgroups.v2}
	} else {
		for _, d := range p.cgroups.v1 {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		for _, m := range mounts {
			if !strings.HasPrefix(d, m.dir+"/") {
				continue
			}
			key := ""
			for _, opt := range m.options {
				if slices.Contains(v1Controllers, opt) {
					key = opt
				}
			}
			// The server's cgroup, or the root when it may not write there.
			base := ownDir(m, own[key])
			if base == "" {
				continue
			}
			if filepath.Dir(d) != base && filepath.Dir(d) != m.dir {
				t.Errorf("sandbox parent %s is neither under the server's cgroup %s nor the root", d, base)
			}
			if os.Geteuid() == 0 && filepath.Dir(d) != base && !m.v2 {
				t.Errorf("a root server's sandbox parent %s is not under its cgroup %s", d, base)
			}
		}
	}
}

//go:build linux

package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// v1Controllers are the v1 hierarchies a sandbox joins.
var v1Controllers = []string{"memory", "pids", "cpu", "freezer"}

// cgroupMount is one cgroup or cgroup2 mount from /proc/self/mountinfo.
type cgroupMount struct {
	dir     string
	root    string // the cgroup the mount shows at dir ("/" usually)
	v2      bool
	options []string // super options: the controllers of a v1 mount
}

// readCgroupMounts lists the cgroup mounts of this mount namespace.
func readCgroupMounts() ([]cgroupMount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var mounts []cgroupMount
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// "36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch qf[0] {
		case "cgroup2":
			mounts = append(mounts, cgroupMount{dir: unescapeMount(pf[4]), root: unescapeMount(pf[3]), v2: true})
		case "cgroup":
			mounts = append(mounts, cgroupMount{dir: unescapeMount(pf[4]), root: unescapeMount(pf[3]), options: strings.Split(qf[2], ",")})
		}
	}
	return mounts, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroups reads /proc/self/cgroup: the server's cgroup in each v1
// controller's hierarchy, and in the v2 one under "".
func ownCgroups() map[string]string {
	own := map[string]string{}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return own
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// "4:memory:/system.slice/x.service", "0::/user.slice/…"
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			own[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own
}

// ownDir is the directory of the server's cgroup path own in a hierarchy
// mounted at mnt showing root; "" when own is not under root (the mount
// shows another part of the hierarchy).
func ownDir(mnt cgroupMount, own string) string {
	if own == "" {
		return ""
	}
	root := strings.TrimSuffix(mnt.root, "/")
	if root != "" && own != root && !strings.HasPrefix(own, root+"/") {
		return ""
	}
	rel := strings.TrimPrefix(own, root)
	if strings.Contains("/"+rel+"/", "/../") {
		return ""
	}
	return filepath.Join(mnt.dir, rel)
}

// usableDir makes (or keeps) directory dir and reports whether this process
// may create cgroups in it: a parent left by a root server is not the
// parent of an unprivileged one.
func usableDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return unix.Access(dir, unix.W_OK|unix.X_OK)
}

// detectCgroups finds the cgroup hierarchies for mode (auto, v1, v2) and
// creates the provider's parent cgroup name in each: under the server's own
// cgroup, so that limits an operator puts on the service bind its
// sandboxes too, else (no permission there, or cgroup v2's rule against
// processes in inner cgroups cannot be met) at the hierarchy's root. A
// parent this process cannot create cgroups in (a root server's, seen by an
// unprivileged one) is skipped. A nil result with a nil error means mode is
// off.
func detectCgroups(mode, name string) (*cgroups, error) {
	if mode == CgroupsOff {
		return nil, nil
	}
	mounts, err := readCgroupMounts()
	if err != nil {
		return nil, fmt.Errorf("read cgroup mounts: %w", err)
	}
	var v2mount cgroupMount
	v1mounts := map[string]cgroupMount{}
	for _, m := range mounts {
		if m.v2 {
			// Prefer /sys/fs/cgroup itself (pure v2) over a hybrid
			// host's /sys/fs/cgroup/unified.
			if v2mount.dir == "" || m.dir == "/sys/fs/cgroup" {
				v2mount = m
			}
			continue
		}
		for _, opt := range m.options {
			for _, c := range v1Controllers {
				if opt == c {
					v1mounts[c] = m
				}
			}
		}
	}
	if mode == CgroupsAuto {
		switch {
		case len(v1mounts) > 0:
			// A v1 or hybrid host: the controllers live in v1.
			mode = CgroupsV1
		case v2mount.dir != "":
			mode = CgroupsV2
		default:
			return nil, errors.New("no cgroup filesystem is mounted")
		}
	}
	switch mode {
	case CgroupsV1:
		if len(v1mounts) == 0 {
			return nil, errors.New("no cgroup v1 controller is mounted")
		}
		return setupV1(v1mounts, ownCgroups(), name)
	case CgroupsV2:
		if v2mount.dir == "" {
			return nil, errors.New("no cgroup2 filesystem is mounted")
		}
		return setupV2(v2mount, ownCgroups()[""], name)
	}
	return nil, fmt.Errorf("cgroup mode %q: want auto, v1, v2 or off", mode)
}

func setupV1(mounts map[string]cgroupMount, own map[string]string, name string) (*cgroups, error) {
	cg := &cgroups{version: 1, v1: map[string]string{}}
	var errs []error
	for _, c := range v1Controllers {
		mnt, ok := mounts[c]
		if !ok {
			continue
		}
		var candidates []string
		if d := ownDir(mnt, own[c]); d != "" && d != mnt.dir {
			candidates = append(candidates, filepath.Join(d, name))
		}
		candidates = append(candidates, filepath.Join(mnt.dir, name))
		for _, dir := range candidates {
			if err := usableDir(dir); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", dir, err))
				continue
			}
			cg.v1[c] = dir
			cg.enable(c)
			break
		}
	}
	if len(cg.v1) == 0 {
		return nil, fmt.Errorf("create cgroup %s: %w", name, errors.Join(errs...))
	}
	return cg, nil
}

// v2Controllers are the v2 controllers sandboxes get (the freezer is part
// of every v2 cgroup).
var v2Controllers = []string{"memory", "pids", "cpu"}

// setupV2 makes the parent of the sandbox cgroups in the v2 hierarchy at
// mnt: under the server's own cgroup own when it can, else at the root.
// Controllers are handed down with cgroup.subtree_control, which v2 allows
// only in a cgroup without processes of its own: when the server's cgroup
// holds nothing but this process, the server moves into a leaf beside the
// sandboxes' parent ("<own>/<name>-server"); when it holds others, the
// controllers cannot be enabled there and the root is used.
func setupV2(mnt cgroupMount, own, name string) (*cgroups, error) {
	var errs []error
	if d := ownDir(mnt, own); d != "" && d != mnt.dir {
		cg, err := setupV2Under(d, name, true)
		if err == nil {
			return cg, nil
		}
		errs = append(errs, err)
	}
	cg, err := setupV2Under(mnt.dir, name, false)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	return cg, nil
}

// setupV2Under makes base/name and enables the controllers in base and in
// it. With leaf, base is the server's own cgroup, which the server
// leaves for base/<name>-server first when it is alone in it.
func setupV2Under(base, name string, leaf bool) (*cgroups, error) {
	parent := filepath.Join(base, name)
	if err := usableDir(parent); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", parent, err)
	}
	if leaf {
		if err := leaveForLeaf(base, name+"-server"); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", base, err)
		}
	}
	avail := strings.Fields(readTrim(filepath.Join(base, "cgroup.controllers")))
	// Hand the controllers down, one write per controller, so a controller
	// the host refuses (for example in a cgroup namespace whose root has
	// processes) does not cost us the others. Above base, whoever
	// delegated it decides.
	dirs := []string{base, parent}
	for _, c := range avail {
		if !slices.Contains(v2Controllers, c) {
			continue
		}
		for _, dir := range dirs {
			_ = writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+c)
		}
	}
	cg := &cgroups{version: 2, v2: parent}
	for _, c := range strings.Fields(readTrim(filepath.Join(parent, "cgroup.subtree_control"))) {
		if c != "freezer" { // v2 has no freezer controller (see below)
			cg.enable(c)
		}
	}
	if leaf && len(avail) > 0 && !cg.memory && !cg.pids && !cg.cpu {
		_ = syscall.Rmdir(parent)
		return nil, fmt.Errorf("no controller could be enabled in %s", base)
	}
	// cgroup.freeze is part of the core of every non-root v2 cgroup (Linux
	// 5.2 and later).
	if _, err := os.Stat(filepath.Join(parent, "cgroup.freeze")); err == nil {
		cg.freezer = true
	}
	return cg, nil
}

// leaveForLeaf moves this process into base/leaf when it is the only
// process in base, so that base may enable controllers for its children.
// It does nothing when base has no processes (the server already left).
func leaveForLeaf(base, leaf string) error {
	var others bool
	procs := strings.Fields(readTrim(filepath.Join(base, "cgroup.procs")))
	if len(procs) == 0 {
		return nil
	}
	self := strconv.Itoa(os.Getpid())
	for _, pid := range procs {
		if pid != self {
			others = true
		}
	}
	if others {
		return fmt.Errorf("it holds processes other than this server (%d), so it cannot hand controllers down", len(procs))
	}
	dir := filepath.Join(base, leaf)
	if err := usableDir(dir); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "cgroup.procs"), self)
}

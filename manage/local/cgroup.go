//go:build linux

package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The cgroup modes of Config.Cgroups.
const (
	CgroupsAuto = "auto"
	CgroupsV1   = "v1"
	CgroupsV2   = "v2"
	CgroupsOff  = "off"
)

// cgroupLimits are the values written into a sandbox's cgroup. Zero means
// "leave the kernel default" for that controller.
type cgroupLimits struct {
	memoryBytes int64
	cpus        float64
	pids        int64
}

// cgroups knows where this provider's sandbox cgroups live and which
// controllers they get. It is read-only after detectCgroups.
type cgroups struct {
	version int // 1 or 2
	// v1: controller → the provider's parent directory in that controller's
	// hierarchy ("<mount>/<name>"). Controllers co-mounted share a directory.
	v1 map[string]string
	// v2: the provider's parent directory.
	v2 string
	// What sandbox cgroups can do.
	memory, pids, cpu, freezer bool
}

// enable records that sandbox cgroups have controller c (one of
// v1Controllers); other controllers are ignored.
func (cg *cgroups) enable(c string) {
	switch c {
	case "memory":
		cg.memory = true
	case "pids":
		cg.pids = true
	case "cpu":
		cg.cpu = true
	case "freezer":
		cg.freezer = true
	}
}

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

// cgroup is one sandbox's cgroup: a directory in each hierarchy.
type cgroup struct {
	v2      bool
	dirs    []string // every directory, created in this order
	freezer string   // the directory holding the freezer, "" if none
}

// dirsFor lists a sandbox's cgroup directories.
func (s *cgroups) dirsFor(id string) (dirs []string, freezer string) {
	if s.version == 2 {
		d := filepath.Join(s.v2, id)
		if s.freezer {
			freezer = d
		}
		return []string{d}, freezer
	}
	seen := map[string]bool{}
	for _, c := range v1Controllers {
		parent, ok := s.v1[c]
		if !ok {
			continue
		}
		d := filepath.Join(parent, id)
		if c == "freezer" {
			freezer = d
		}
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return dirs, freezer
}

// open returns the handle of id's cgroup whether or not it exists.
func (s *cgroups) open(id string) *cgroup {
	dirs, freezer := s.dirsFor(id)
	return &cgroup{v2: s.version == 2, dirs: dirs, freezer: freezer}
}

// create makes id's cgroup and writes its limits. A limit the host refuses is
// an error: the caller asked for it.
func (s *cgroups) create(id string, lim cgroupLimits) (*cgroup, error) {
	cg := s.open(id)
	for _, d := range cg.dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			_ = cg.remove(context.Background())
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
	}
	if err := s.writeLimits(id, lim); err != nil {
		_ = cg.remove(context.Background())
		return nil, err
	}
	return cg, nil
}

func (s *cgroups) writeLimits(id string, lim cgroupLimits) error {
	type setting struct{ file, value string }
	var sets []setting
	if s.version == 2 {
		d := filepath.Join(s.v2, id)
		if s.memory && lim.memoryBytes > 0 {
			sets = append(sets, setting{filepath.Join(d, "memory.max"), strconv.FormatInt(lim.memoryBytes, 10)})
		}
		if s.pids && lim.pids > 0 {
			sets = append(sets, setting{filepath.Join(d, "pids.max"), strconv.FormatInt(lim.pids, 10)})
		}
		if s.cpu && lim.cpus > 0 {
			sets = append(sets, setting{filepath.Join(d, "cpu.max"), fmt.Sprintf("%d %d", cpuQuota(lim.cpus), cpuPeriod)})
		}
	} else {
		if s.memory && lim.memoryBytes > 0 {
			sets = append(sets, setting{filepath.Join(s.v1["memory"], id, "memory.limit_in_bytes"), strconv.FormatInt(lim.memoryBytes, 10)})
		}
		if s.pids && lim.pids > 0 {
			sets = append(sets, setting{filepath.Join(s.v1["pids"], id, "pids.max"), strconv.FormatInt(lim.pids, 10)})
		}
		if s.cpu && lim.cpus > 0 {
			// cpu.cfs_period_us defaults to 100 ms on every kernel.
			sets = append(sets, setting{filepath.Join(s.v1["cpu"], id, "cpu.cfs_quota_us"), strconv.FormatInt(cpuQuota(lim.cpus), 10)})
		}
	}
	for _, st := range sets {
		if err := writeFile(st.file, st.value); err != nil {
			return fmt.Errorf("set cgroup limit %s=%s: %w", st.file, st.value, err)
		}
	}
	return nil
}

// cpuPeriod is the CFS period the CPU quota is expressed in (100 ms).
const cpuPeriod = 100000

func cpuQuota(cpus float64) int64 { return max(int64(cpus*cpuPeriod), 1000) }

// add moves the processes pids (with all their threads) into the cgroup.
func (c *cgroup) add(pids ...int) error {
	for _, d := range c.dirs {
		for _, pid := range pids {
			if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
				return fmt.Errorf("move pid %d into cgroup %s: %w", pid, d, err)
			}
		}
	}
	return nil
}

// procs lists the processes in the cgroup.
func (c *cgroup) procs() []int {
	if len(c.dirs) == 0 {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(c.dirs[0], "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// exists reports whether the cgroup's directories are there.
func (c *cgroup) exists() bool {
	if len(c.dirs) == 0 {
		return false
	}
	_, err := os.Stat(c.dirs[0])
	return err == nil
}

// hasFreezer reports whether Pause can use this cgroup.
func (c *cgroup) hasFreezer() bool { return c != nil && c.freezer != "" }

// frozen reports whether the cgroup is frozen (or freezing).
func (c *cgroup) frozen() (bool, error) {
	if c.v2 {
		data, err := os.ReadFile(filepath.Join(c.freezer, "cgroup.freeze"))
		if err != nil {
			return false, err
		}
		return strings.TrimSpace(string(data)) == "1", nil
	}
	data, err := os.ReadFile(filepath.Join(c.freezer, "freezer.state"))
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(data)) != "THAWED", nil
}

// setFrozen freezes or thaws the cgroup and waits until the kernel reports
// the new state. Freezing is asynchronous: tasks stop at their next return to
// user space, so the state file is re-read (with a short, growing pause)
// until it says the transition finished; v1 also needs the request repeated
// while it reads FREEZING.
func (c *cgroup) setFrozen(ctx context.Context, frozen bool) error {
	var file, request, want string
	var check func() (bool, error)
	if c.v2 {
		file, request = filepath.Join(c.freezer, "cgroup.freeze"), "0"
		want = "frozen 0"
		if frozen {
			request, want = "1", "frozen 1"
		}
		events := filepath.Join(c.freezer, "cgroup.events")
		check = func() (bool, error) {
			data, err := os.ReadFile(events)
			if err != nil {
				return false, err
			}
			for _, line := range strings.Split(string(data), "\n") {
				if strings.HasPrefix(line, "frozen ") {
					return line == want, nil
				}
			}
			return false, fmt.Errorf("%s has no frozen line", events)
		}
	} else {
		file, request = filepath.Join(c.freezer, "freezer.state"), "THAWED"
		if frozen {
			request = "FROZEN"
		}
		check = func() (bool, error) {
			data, err := os.ReadFile(file)
			if err != nil {
				return false, err
			}
			return strings.TrimSpace(string(data)) == request, nil
		}
	}
	return poll(ctx, 20*time.Microsecond, 5*time.Millisecond, func() (bool, error) {
		if err := writeFile(file, request); err != nil {
			return false, fmt.Errorf("write %s to %s: %w", request, file, err)
		}
		return check()
	})
}

// kill ends every process in the cgroup. v2 has cgroup.kill (Linux 5.14);
// otherwise the cgroup is frozen first so nothing forks between reading the
// process list and signalling it, then thawed so the signals are delivered.
func (c *cgroup) kill() {
	if c.v2 && writeFile(filepath.Join(c.dirs[0], "cgroup.kill"), "1") == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	frozen := c.freezer != "" && c.setFrozen(ctx, true) == nil
	for _, pid := range c.procs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if frozen {
		_ = c.setFrozen(ctx, false)
	} else {
		// Without a freezer a process may have forked meanwhile: sweep
		// until the list is empty or the processes are only dying.
		for range 10 {
			pids := c.procs()
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// remove deletes the cgroup's directories, killing anything left inside.
// Dying processes leave a cgroup a moment after SIGKILL, so a busy directory
// is retried briefly (until ctx ends or about two seconds pass).
func (c *cgroup) remove(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	killed := false
	var busy []string
	err := poll(ctx, 50*time.Microsecond, 20*time.Millisecond, func() (bool, error) {
		busy = busy[:0]
		var errs []error
		for _, d := range c.dirs {
			err := syscall.Rmdir(d)
			switch {
			case err == nil, errors.Is(err, syscall.ENOENT):
			case errors.Is(err, syscall.EBUSY):
				busy = append(busy, d)
			default:
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
		if len(busy) == 0 {
			return true, errors.Join(errs...)
		}
		if !killed {
			c.kill()
			killed = true
		}
		return false, nil
	})
	if err != nil && len(busy) > 0 {
		return fmt.Errorf("remove cgroup %s: still busy: %w", strings.Join(busy, ", "), err)
	}
	return err
}

// writeFile writes value to an existing file (a cgroup or proc knob) with a
// single write, as the kernel expects.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readTrim(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

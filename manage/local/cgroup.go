//go:build linux

package local

import (
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

// addMissing moves process pid into the cgroup's directories that do not
// list it yet (a process forked in the cgroup lists in all of them).
func (c *cgroup) addMissing(pid int) error {
	for _, d := range c.dirs {
		if slices.Contains(procsIn(d), pid) {
			continue
		}
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("move pid %d into cgroup %s: %w", pid, d, err)
		}
	}
	return nil
}

// procs lists the processes in the cgroup.
func (c *cgroup) procs() []int {
	if len(c.dirs) == 0 {
		return nil
	}
	return procsIn(c.dirs[0])
}

// procsIn lists the processes in cgroup directory dir.
func procsIn(dir string) []int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
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

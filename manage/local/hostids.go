//go:build linux

package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/manage/filelock"
)

// IDRange is a range of host user and group ids: First, First+1, …,
// First+Count-1.
type IDRange struct {
	First, Count int
}

// DefaultSandboxIDs is the range a root server takes one host uid (and the
// same gid) per sandbox from. It lies above the ranges systems hand out
// elsewhere: login users, /etc/subuid's usual blocks from 100000, and
// systemd-nspawn's container range (524288–1879048191); and below 2^31,
// which some tools read as a signed number.
var DefaultSandboxIDs = IDRange{First: 0x70000000, Count: 65536}

// String is "FIRST:COUNT".
func (r IDRange) String() string { return fmt.Sprintf("%d:%d", r.First, r.Count) }

// ParseIDRange parses "FIRST:COUNT".
func ParseIDRange(s string) (IDRange, error) {
	first, count, ok := strings.Cut(s, ":")
	var r IDRange
	var err1, err2 error
	if ok {
		r.First, err1 = strconv.Atoi(first)
		r.Count, err2 = strconv.Atoi(count)
	}
	if !ok || err1 != nil || err2 != nil {
		return IDRange{}, fmt.Errorf("id range %q: want FIRST:COUNT", s)
	}
	return r, r.check()
}

func (r IDRange) check() error {
	if r.First < 1000 || r.Count < 1 || int64(r.First)+int64(r.Count) > 1<<31 {
		return fmt.Errorf("id range %s: want a first id of at least 1000, a count of at least 1, and ids below 2^31", r)
	}
	return nil
}

// Every sandbox of a root server runs as its own host uid and gid (the same
// number), so per-user kernel accounting — RLIMIT_NPROC above all, which
// counts every process of a uid in the user namespaces it made — is not
// shared between tenants. The ids are handed out from a range and recorded
// twice, both files belonging to the server:
//
//	/run/sandbox-mcp/hostids/UID   the claim: the directory of the sandbox that has UID
//	StateDir/sandboxes/ID/hostid   the sandbox's UID, read when it restarts
//
// The claims are machine-wide, not per state directory: two root servers
// with different state directories draw from the same range, and between a
// claim and the sandbox's first process nothing else shows the id as taken.
// Where /run/sandbox-mcp cannot be made, the claims live in
// StateDir/hostids, and only servers sharing that state directory are kept
// apart. Allocation holds the claims directory's .lock (flock) across
// processes. An id is
// free when nothing claims it, or its claim is stale: the sandbox it names
// has no directory (it was killed, or its Create crashed) — and, either way,
// no process on the host runs as it, so an id is never handed out while
// anything of an earlier sandbox (or anyone else) still runs with it. A
// stopped sandbox keeps its claim, so a restart does not give its id to
// another.
const (
	machineHostIDsDir = "/run/sandbox-mcp/hostids"
	hostIDsDir        = "hostids"
	hostIDFile        = "hostid"
	hostIDsLock       = ".lock"
)

// hostIDs allocates per-sandbox host ids from a range.
type hostIDs struct {
	dir          string // the claims: machineHostIDsDir, else StateDir/hostids
	sandboxesDir string // absolute
	ids          IDRange
}

// newHostIDs makes the claims directory: the machine-wide one when it can,
// else one in the state directory.
func newHostIDs(stateDir, sandboxesDir string, ids IDRange) (*hostIDs, error) {
	abs, err := filepath.Abs(sandboxesDir)
	if err != nil {
		return nil, fmt.Errorf("sandbox host ids: %w", err)
	}
	dir := machineHostIDsDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		dir = filepath.Join(stateDir, hostIDsDir)
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("sandbox host ids: %w", err)
		}
	}
	return &hostIDs{dir: dir, sandboxesDir: abs, ids: ids}, nil
}

// holder is what the claim of sandbox id says: its directory's path, which
// names it among the sandboxes of every state directory.
func (h *hostIDs) holder(id string) string { return filepath.Join(h.sandboxesDir, id) }

// claimedBy reports whether a claim by holder is sandbox id's: its
// directory's path, or its bare id in claims written before they were
// machine-wide.
func (h *hostIDs) claimedBy(holder, id string) bool { return holder == h.holder(id) || holder == id }

// lock takes the allocation lock.
func (h *hostIDs) lock(ctx context.Context) (*os.File, error) {
	f, err := filelock.Lock(ctx, filepath.Join(h.dir, hostIDsLock), unix.LOCK_EX)
	if err != nil {
		return nil, fmt.Errorf("sandbox host ids: %w", err)
	}
	return f, nil
}

// allocate claims a free id for sandbox id, whose directory (dir: final
// or still hidden) exists, and records it there.
func (h *hostIDs) allocate(ctx context.Context, id, dir string) (int, error) {
	l, err := h.lock(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return h.allocateLocked(id, dir)
}

func (h *hostIDs) allocateLocked(id, dir string) (int, error) {
	// An exited process still counts against its uid's RLIMIT_NPROC until
	// it is reaped, and init may take its time with a sandbox's exited
	// bwrap: an id only zombies hold would start the next tenant with part
	// of its process budget gone. Such ids are taken only when no other is
	// free.
	live, all := processIDs()
	zombieOnly := 0
	for uid := h.ids.First; uid < h.ids.First+h.ids.Count; uid++ {
		if live[uid] {
			continue
		}
		if free, err := h.free(uid); err != nil || !free {
			if err != nil {
				return 0, err
			}
			continue
		}
		if all[uid] {
			if zombieOnly == 0 {
				zombieOnly = uid
			}
			continue
		}
		return h.claim(id, dir, uid)
	}
	if zombieOnly != 0 {
		return h.claim(id, dir, zombieOnly)
	}
	return 0, fmt.Errorf("sandbox host ids: all %d ids of the range %s are in use (by sandboxes, stopped ones included, or by running processes): "+
		"kill unused sandboxes or give a larger range (--sandbox-ids)", h.ids.Count, h.ids)
}

// free reports whether no live sandbox claims uid (a claim left by a gone
// one is stale).
func (h *hostIDs) free(uid int) (bool, error) {
	holder, err := os.ReadFile(filepath.Join(h.dir, strconv.Itoa(uid)))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("sandbox host ids: %w", err)
	}
	return h.stale(string(holder)), nil
}

// claim claims uid for sandbox id and records it in dir.
func (h *hostIDs) claim(id, dir string, uid int) (int, error) {
	claim := filepath.Join(h.dir, strconv.Itoa(uid))
	if err := writeFileAtomic(claim, []byte(h.holder(id)), 0o600); err != nil {
		return 0, fmt.Errorf("sandbox host ids: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, hostIDFile), []byte(strconv.Itoa(uid)+"\n"), 0o600); err != nil {
		_ = os.Remove(claim)
		return 0, fmt.Errorf("sandbox host ids: %w", err)
	}
	return uid, nil
}

// stale reports whether a claim by holder (a sandbox directory's path; a
// bare id in claims written before they were machine-wide, relative to this
// server's sandboxes) is left over: no such sandbox directory exists, final
// or being made. The hidden name is looked at first, so a rename into place
// between the two looks is seen.
func (h *hostIDs) stale(holder string) bool {
	parent, id := h.sandboxesDir, holder
	if filepath.IsAbs(holder) {
		parent, id = filepath.Dir(holder), filepath.Base(holder)
	}
	if !validID(id) {
		return true
	}
	for _, name := range []string{newDirPrefix + id, id} {
		if _, err := os.Lstat(filepath.Join(parent, name)); err == nil {
			return false
		}
	}
	return true
}

// ensure returns the id of the existing sandbox id in dir, for a restart: its
// recorded one when its claim is still its own and no process runs as it;
// otherwise (a sandbox from before per-sandbox ids, or an id someone else
// took) a fresh one, and then changed reports that its files must be given
// to it.
func (h *hostIDs) ensure(ctx context.Context, id, dir string) (uid int, changed bool, err error) {
	l, err := h.lock(ctx)
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = l.Close() }()
	if uid, ok := h.recorded(dir); ok {
		holder, err := os.ReadFile(filepath.Join(h.dir, strconv.Itoa(uid)))
		if err == nil && h.claimedBy(string(holder), id) && idFreed(ctx, uid) {
			return uid, false, nil
		}
	}
	uid, err = h.allocateLocked(id, dir)
	return uid, err == nil, err
}

// stoppingGrace bounds the wait for the last processes of a stopped
// sandbox to finish exiting: a task leaves its cgroup before it is done
// exiting, so an emptied cgroup can still show one for a moment.
const stoppingGrace = 2 * time.Second

// idFreed reports whether no live process runs as uid, waiting up to
// stoppingGrace for dying ones.
func idFreed(ctx context.Context, uid int) bool {
	grace, cancel := context.WithTimeout(ctx, stoppingGrace)
	defer cancel()
	return poll(grace, 100*time.Microsecond, 20*time.Millisecond, func() (bool, error) {
		live, _ := processIDs()
		return !live[uid], nil
	}) == nil
}

// recorded reads the id recorded in sandbox directory dir, when it is in the
// range.
func (h *hostIDs) recorded(dir string) (int, bool) {
	uid, err := strconv.Atoi(readTrim(filepath.Join(dir, hostIDFile)))
	if err != nil || uid < h.ids.First || uid >= h.ids.First+h.ids.Count {
		return 0, false
	}
	return uid, true
}

// release drops the claim of sandbox id (whose directory, maybe already
// moved away, is dir) once its processes are gone.
func (h *hostIDs) release(ctx context.Context, id, dir string) {
	uid, ok := h.recorded(dir)
	if !ok {
		return
	}
	l, err := h.lock(ctx)
	if err != nil {
		return
	}
	defer func() { _ = l.Close() }()
	claim := filepath.Join(h.dir, strconv.Itoa(uid))
	if holder, err := os.ReadFile(claim); err == nil && h.claimedBy(string(holder), id) {
		_ = os.Remove(claim)
	}
}

// processIDs are the uids and gids (real, effective, saved, filesystem) of
// the processes on the host: live the ones of running processes, all those
// of zombies too (they run nothing, but hold their share of their uid's
// process count until they are reaped). Each status file is read into one
// reused buffer and only its State, Uid and Gid lines are parsed: the scan
// runs under the allocation lock on every Create.
func processIDs() (live, all map[int]bool) {
	live, all = map[int]bool{}, map[int]bool{}
	proc, err := os.Open("/proc")
	if err != nil {
		return live, all
	}
	names, err := proc.Readdirnames(-1)
	_ = proc.Close()
	if err != nil {
		return live, all
	}
	buf := make([]byte, 8<<10)
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		var data []byte
		if data, buf, err = readSmallFile("/proc/"+name+"/status", buf); err != nil {
			continue
		}
		zombie := bytes.Contains(data, []byte("\nState:\tZ"))
		for _, key := range [][]byte{[]byte("\nUid:"), []byte("\nGid:")} {
			i := bytes.Index(data, key)
			if i < 0 {
				continue
			}
			line := data[i+len(key):]
			if end := bytes.IndexByte(line, '\n'); end >= 0 {
				line = line[:end]
			}
			for _, f := range bytes.Fields(line) {
				if n, err := strconv.Atoi(string(f)); err == nil {
					all[n] = true
					if !zombie {
						live[n] = true
					}
				}
			}
		}
	}
	return live, all
}

// readSmallFile reads the whole file at path into buf, grown when it is
// too short, and returns the content and the buffer to reuse.
func readSmallFile(path string, buf []byte) (data, grown []byte, err error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, buf, err
	}
	defer func() { _ = unix.Close(fd) }()
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, buf, err
		}
		if m == 0 {
			return buf[:n], buf, nil
		}
		n += m
	}
}

// chownTree gives every file under root (not following symlinks) to
// uid:gid, for a sandbox whose host id changed.
func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := os.Lchown(path, uid, gid); err != nil && !errors.Is(err, syscall.ENOENT) {
			return err
		}
		return nil
	})
}

// sandboxCred is the credential bwrap runs as for a sandbox with host id
// uid (uid and gid alike), with no supplementary groups.
func sandboxCred(uid int) *syscall.Credential {
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
}

//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/atomicfile"
	"github.com/sandbox-mcp/sandbox-mcp/manage/filelock"
)

// Several Providers, in one process or in several, may share a state
// directory (a desktop client's server, an IDE's server and a person's
// `sandbox-mcp call` all use the default one). Ownership is per sandbox,
// kept with two advisory locks (flock) in its directory:
//
//	owner.lock  held exclusively by the Provider whose daemon runs the
//	            sandbox, for as long as that daemon runs (the descriptor is
//	            close-on-exec, so no child inherits it). The kernel drops it
//	            when that process dies, and so does the daemon
//	            (--die-with-parent): a free owner lock means nothing runs. A
//	            detached daemon's keeper (detach.go) shares the lock and
//	            holds it until the daemon ends, also when the Provider's
//	            process is gone.
//	op.lock     held exclusively while a Provider starts, pauses, resumes or
//	            kills the sandbox, and shared while one reads the state of a
//	            sandbox it does not own. Never held longer than one call.
//
// The owner writes daemon.json (pid, cgroup, isolation, and when the daemon
// ended and why) so that other Providers can report on the sandbox and act
// on it through the kernel: freeze its cgroup, signal its processes. The
// lock order is: a Provider's in-process entry lock, then op.lock, then
// owner.lock.
const (
	opLockFile     = "op.lock"
	ownerLockFile  = "owner.lock"
	daemonFile     = "daemon.json"
	metadataFile   = "sandbox.json"
	newDirPrefix   = ".new-"
	trashDir       = ".trash"
	staleNewDirAge = time.Minute
)

// errSandboxGone means the sandbox directory went away (killed) while a lock
// on it was awaited.
var errSandboxGone = errors.New("sandbox directory removed")

// lockOp takes a sandbox's op.lock (how: unix.LOCK_SH or unix.LOCK_EX),
// waiting until ctx ends; with wait false a busy lock is filelock.ErrLocked.
// It returns errSandboxGone when the directory does not exist or was moved
// away (a Kill renames it) while waiting.
func lockOp(ctx context.Context, dir string, how int, wait bool) (*os.File, error) {
	path := filepath.Join(dir, opLockFile)
	var f *os.File
	var err error
	if wait {
		f, err = filelock.Lock(ctx, path, how)
	} else {
		f, err = filelock.TryLock(path, how)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errSandboxGone
	}
	if err != nil {
		return nil, err
	}
	held, err1 := f.Stat()
	now, err2 := os.Lstat(path)
	if err1 != nil || err2 != nil || !os.SameFile(held, now) {
		_ = f.Close()
		return nil, errSandboxGone
	}
	return f, nil
}

// ownerRunning reports whether some Provider holds the sandbox's owner lock,
// that is runs its daemon. The caller holds op.lock, so no other Provider
// probes or takes the owner lock meanwhile. A probe is a shared lock, which
// any number of probing Providers can hold at once.
func ownerRunning(dir string) (bool, error) {
	f, err := filelock.TryLock(filepath.Join(dir, ownerLockFile), unix.LOCK_SH)
	switch {
	case errors.Is(err, filelock.ErrLocked):
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, errSandboxGone
	case err != nil:
		return false, err
	}
	_ = f.Close()
	return false, nil
}

// endingGrace bounds the wait for an owner that recorded its daemon's end
// to release the owner lock, which it does right after.
const endingGrace = time.Second

// settledOwnerRunning is ownerRunning, except that an owner whose record
// says its daemon ended is given up to endingGrace to release the lock: its
// waiter writes that record as its last step before releasing. An owner that
// still holds the lock after that runs the sandbox (a new daemon whose record
// could not be written). The caller holds op.lock.
func settledOwnerRunning(ctx context.Context, dir string) (bool, error) {
	running, err := ownerRunning(dir)
	if err != nil || !running {
		return running, err
	}
	if rec, err := readRecord(dir); err != nil || rec.EndedAt.IsZero() {
		return true, nil
	}
	grace, cancel := context.WithTimeout(ctx, endingGrace)
	defer cancel()
	var probeErr error
	err = poll(grace, 50*time.Microsecond, 5*time.Millisecond, func() (bool, error) {
		running, probeErr = ownerRunning(dir)
		return probeErr != nil || !running, nil
	})
	switch {
	case err == nil:
		return running, probeErr
	case ctx.Err() != nil:
		return false, ctx.Err()
	}
	return true, nil
}

// takeOwnership takes the sandbox's owner lock when it is free
// (filelock.ErrLocked when another Provider holds it). The caller holds
// op.lock exclusively.
func takeOwnership(dir string) (*os.File, error) {
	f, err := filelock.TryLock(filepath.Join(dir, ownerLockFile), unix.LOCK_EX)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errSandboxGone
	}
	return f, err
}

// awaitOwnership waits until the Provider that runs the sandbox released its
// owner lock (its daemon died and it cleaned up) and takes it, until ctx
// ends. The caller holds op.lock exclusively.
func awaitOwnership(ctx context.Context, dir string) (*os.File, error) {
	f, err := filelock.Lock(ctx, filepath.Join(dir, ownerLockFile), unix.LOCK_EX)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errSandboxGone
	}
	return f, err
}

// daemonRecord is daemon.json: what the Provider running a sandbox's daemon
// tells the others about it.
type daemonRecord struct {
	// OwnerPID is the process that runs the daemon.
	OwnerPID int `json:"owner_pid"`
	// PID is the daemon's outermost process (bwrap, or envd), and PIDStart
	// its start time in clock ticks since boot (/proc/PID/stat field 22),
	// which tells it from a later process that reuses the pid.
	PID      int    `json:"pid"`
	PIDStart string `json:"pid_start"`
	// Isolation is bwrap or none.
	Isolation string `json:"isolation"`
	// CgroupDirs are the sandbox's cgroup directories, Freezer the one with
	// the freezer ("" without), CgroupV2 whether they are cgroup v2.
	CgroupDirs []string `json:"cgroup_dirs,omitempty"`
	Freezer    string   `json:"freezer,omitempty"`
	CgroupV2   bool     `json:"cgroup_v2,omitempty"`
	// StartedAt is when the daemon was started.
	StartedAt time.Time `json:"started_at"`
	// EndedAt and Exit say when and why the daemon ended; zero while it runs
	// (and when its owner died without saying).
	EndedAt time.Time `json:"ended_at,omitzero"`
	Exit    string    `json:"exit,omitempty"`
}

// readRecord reads a sandbox's daemon.json.
func readRecord(dir string) (daemonRecord, error) {
	var r daemonRecord
	data, err := os.ReadFile(filepath.Join(dir, daemonFile))
	if err != nil {
		return r, err
	}
	err = json.Unmarshal(data, &r)
	return r, err
}

// writeRecord replaces a sandbox's daemon.json atomically. It fails, creating
// nothing, when the directory is gone.
func writeRecord(dir string, r daemonRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, daemonFile), append(data, '\n'), 0o600)
}

// writeFileAtomic replaces path with data whole (see atomicfile.Write), so
// readers see the old or the new content, never a part.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return atomicfile.Write(path, data, perm)
}

// livePID returns the recorded daemon pid when that process still runs (its
// start time matches the record), else 0.
func (r daemonRecord) livePID() int {
	if r.PID <= 0 || r.PIDStart == "" || procStart(r.PID) != r.PIDStart {
		return 0
	}
	return r.PID
}

// cgroup returns the recorded cgroup, or nil. Only directories named after
// the sandbox are accepted.
func (r daemonRecord) cgroup(id string) *cgroup {
	if len(r.CgroupDirs) == 0 {
		return nil
	}
	cg := &cgroup{v2: r.CgroupV2}
	for _, d := range r.CgroupDirs {
		if filepath.Base(d) != id || !filepath.IsAbs(d) {
			return nil
		}
		cg.dirs = append(cg.dirs, d)
	}
	if r.Freezer != "" && filepath.Base(r.Freezer) == id {
		cg.freezer = r.Freezer
	}
	return cg
}

// pausedTree reports whether the process tree at pid was stopped with
// SIGSTOP (Pause without a freezer): its outermost process is stopped.
func pausedTree(pid int) bool {
	st := procState(pid)
	return st == 'T' || st == 't'
}

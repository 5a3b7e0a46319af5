//go:build linux

package local

// What a failed start leaves: stopping it, saying why, and sweeping its processes.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
)

// abortGrace bounds how long a start that failed, or whose ctx ended,
// waits for its killed daemon to be reaped and cleaned up.
const abortGrace = 10 * time.Second

// abortStart stops daemon d of sandbox id, which failed to start (what
// failed, and err why), and waits until it let go of the owner lock, even
// once ctx ended (up to abortGrace; the waiter finishes the cleanup after
// that): the caller deletes the sandbox directory next, which must not race
// with the waiter's cleanup in it. It returns the error startDaemon
// reports: Unavailable, or ctx's when ctx ended.
func (p *Provider) abortStart(ctx context.Context, id string, d *daemon, what string, err error) error {
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortGrace)
	defer cancel()
	if d.alive() {
		killProcs(d.cg, d.pid, d.isolation)
	}
	sweepStart(d)
	select {
	case <-d.done:
		// A fork the process started was in flight until it was reaped.
		sweepStart(d)
	case <-grace.Done():
	}
	select {
	case <-d.released:
	case <-grace.Done():
	}
	if ctx.Err() != nil {
		return ctxError("start sandbox "+id, ctx.Err())
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("start sandbox %s: %s: %w", id, what, err))
}

// startFailure explains a daemon that went away during start: its exit
// status and the tail of its output, once it has exited (bounded by ctx).
func (p *Provider) startFailure(ctx context.Context, d *daemon, cause error) error {
	if ctx.Err() != nil {
		return cause
	}
	if !errors.Is(cause, io.EOF) && !errors.Is(cause, io.ErrUnexpectedEOF) {
		return cause
	}
	select {
	case <-d.done:
	case <-ctx.Done():
		return cause
	}
	tail := d.output()
	if tail == "" {
		return fmt.Errorf("exited with %s and wrote nothing", describeExit(d.exitErr, d.isolation, d.detached))
	}
	return fmt.Errorf("exited with %s: %s", describeExit(d.exitErr, d.isolation, d.detached), tail)
}

// sweepStart kills what is left of daemon d's start outside its cgroup. Until
// confine moved them, the keeper's child, bwrap and the sandbox's first
// process are in no cgroup, and killing the process started (the keeper, or
// bwrap) does not reliably end the rest: --die-with-parent arms the
// parent-death signal only once bwrap runs, so a process whose parent died
// before then lives on, and then the closed block pipe lets the sandbox
// start. Every process of a start that can fork names the sandbox directory
// on its command line (the keeper and bwrap's two processes through bwrap's
// arguments, an unisolated sh or envd through --root) and runs as the
// daemon's user; envd inside bwrap dies with its pid namespace's first
// process. Each pass kills all of them; a process forked before its parent
// was killed is found by the next, until a pass finds none (or a few
// seconds pass: dying processes take a moment to exit). A killed process's
// fork may still complete until it is reaped (seen with the keeper: a
// sweep right after its kill found nothing, one after its reaping found
// bwrap), so callers sweep again once it was reaped. A sandbox with a
// host id of its own is swept by that id alone: nothing else runs as it, and
// its processes need not name anything.
func sweepStart(d *daemon) {
	uid := os.Geteuid()
	if a := d.cmd.SysProcAttr; a != nil && a.Credential != nil {
		uid = int(a.Credential.Uid)
	}
	sweepProcesses(d.dir, uid, d.hostID != 0 && uid == d.hostID)
}

// sweepProcesses kills, pass after pass until one finds none (or a few
// seconds pass), the live processes running as uid that name sandbox
// directory dir on their command line, or with byUID all those running as
// uid (the sandbox's own host id).
func sweepProcesses(dir string, uid int, byUID bool) {
	var mark []byte
	if !byUID {
		mark = []byte(dir + "/")
	}
	ctx, cancel := context.WithTimeout(context.Background(), stoppingGrace)
	defer cancel()
	_ = poll(ctx, 50*time.Microsecond, 10*time.Millisecond, func() (bool, error) {
		found := false
		for _, pid := range startProcesses(uid, mark) {
			found = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return !found, nil
	})
}

// startProcesses lists the live (not zombie, not this) processes running as
// uid whose command line contains mark (nil: any).
func startProcesses(uid int, mark []byte) []int {
	return matchProcesses(liveProcesses(), uid, mark)
}

// matchProcesses picks from procs those running as uid whose command line
// contains mark (nil: any).
func matchProcesses(procs []liveProcess, uid int, mark []byte) []int {
	var pids []int
	for _, lp := range procs {
		if lp.uid == uid && (mark == nil || bytes.Contains(lp.cmdline, mark)) {
			pids = append(pids, lp.pid)
		}
	}
	return pids
}

// liveProcess is a live process of the host, as sweeps look at it.
type liveProcess struct {
	pid, uid int
	cmdline  []byte
}

// liveProcesses lists the host's live processes (not zombies, not this
// one) with their real uid and command line.
func liveProcesses() []liveProcess {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var procs []liveProcess
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); !ok || st.state == 'Z' || st.state == 'X' {
			continue
		}
		if uid := procUID(pid); uid >= 0 {
			procs = append(procs, liveProcess{pid: pid, uid: uid, cmdline: cmdline})
		}
	}
	return procs
}

// procUID is process pid's real uid (-1 when it is gone).
func procUID(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if uid, err := strconv.Atoi(f[0]); err == nil {
					return uid
				}
			}
		}
	}
	return -1
}

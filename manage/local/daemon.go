//go:build linux

package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// daemon is one running (or exited) envd of a sandbox, with the bwrap around
// it when isolated, started by this Provider.
type daemon struct {
	isolation string
	cmd       *exec.Cmd
	pid       int     // the process started: bwrap, or envd itself (none)
	cg        *cgroup // nil without cgroups
	dir       string  // the sandbox directory
	record    daemonRecord
	stderr    *tailBuffer
	// lock is the sandbox's owner lock, held while the daemon runs and
	// released by the waiter once it ended and was cleaned up.
	lock     *os.File
	done     chan struct{} // closed once the daemon exited and was cleaned up
	released chan struct{} // closed after done, once the owner lock is released
	exitErr  error         // why it exited; set before done is closed
	endedAt  time.Time     // when the waiter saw it exit; set before done
	// stopReason, when set before the daemon is killed, replaces the exit
	// status in its detail ("daemon stopped: …").
	stopReason atomic.Pointer[string]
}

// alive reports whether the daemon has not exited yet.
func (d *daemon) alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// exitDetail says in a few words why the daemon ended.
func (d *daemon) exitDetail() string {
	if r := d.stopReason.Load(); r != nil {
		return "daemon stopped: " + *r
	}
	return "daemon exited: " + describeExit(d.exitErr, d.isolation)
}

// describeExit renders a daemon's end. bwrap's pid 1 exits with 128+n when the
// sandboxed command died of signal n; that is reported as the signal.
func describeExit(err error, isolation string) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				return "signal: " + ws.Signal().String()
			}
			if code := ws.ExitStatus(); isolation == IsolationBwrap && code > 128 && code < 128+65 {
				return "signal: " + syscall.Signal(code-128).String()
			}
		}
		return ee.Error()
	}
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// sandboxSpec is what a daemon is started with, resolved from a
// manage.SandboxConfig and the provider defaults.
type sandboxSpec struct {
	network bool
	env     map[string]string
	memory  int64
	cpus    float64
	pids    int64
	nofile  uint64
}

// startDaemon starts the envd of sandbox id in dir and returns once it is
// listening. lock is the sandbox's owner lock, held by the caller; the daemon
// keeps it while it runs, and on error it is released before startDaemon
// returns (unless ctx ended first: then shortly after). The caller holds the
// sandbox's op.lock exclusively, so no other Provider acts on the sandbox
// meanwhile.
//
// Nothing inside can run before its cgroup and rlimits are in place: under
// bwrap the sandbox's first process is held on bwrap's block fd until both
// of bwrap's processes were moved into the cgroup and the rlimits set;
// without bwrap envd is the only process and it starts nothing before a
// client asks, which only happens after it reported ready.
func (p *Provider) startDaemon(ctx context.Context, id, dir string, spec sandboxSpec, lock *os.File) (_ *daemon, err error) {
	lockHeld := true
	defer func() {
		if lockHeld {
			_ = lock.Close()
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, ctxError("start sandbox "+id, err)
	}
	var held time.Duration // until bwrap held the sandbox before exec
	envdPath, err := p.envd.path()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: %w", id, err))
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	defer func() { _ = readyR.Close() }()
	closeLater := []*os.File{readyW}
	defer func() {
		for _, f := range closeLater {
			_ = f.Close()
		}
	}()

	d := &daemon{
		isolation: p.isolation, dir: dir, lock: lock, stderr: newTailBuffer(8 << 10),
		done: make(chan struct{}), released: make(chan struct{}),
	}
	var cmd *exec.Cmd
	var infoR, blockW *os.File
	if p.isolation == IsolationBwrap {
		var infoW, blockR *os.File
		if infoR, infoW, err = os.Pipe(); err == nil {
			defer func() { _ = infoR.Close() }()
			closeLater = append(closeLater, infoW)
			if blockR, blockW, err = os.Pipe(); err == nil {
				closeLater = append(closeLater, blockR, blockW)
			}
		}
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		if p.prlimit {
			cmd = exec.Command(p.bwrapPath, p.bwrapArgs(id, dir, envdPath, spec)...)
		} else {
			cmd = exec.Command("/bin/sh", rlimitArgs(spec, p.bwrapPath, p.bwrapArgs(id, dir, envdPath, spec))...)
		}
		cmd.ExtraFiles = []*os.File{readyW, infoW, blockR}
		cmd.Dir = "/"
		cmd.Env = []string{}
		// bwrap --die-with-parent ties the sandbox to this process (see
		// the package comment on threads).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	} else {
		ws := filepath.Join(dir, "workspace")
		// Go programs restore the NOFILE soft limit they started with in
		// every child they spawn, so a limit set on envd once it runs would
		// not reach its children: envd must start with it.
		cmd = exec.Command("/bin/sh", rlimitArgs(spec, envdPath, envdArgs(filepath.Join(dir, "run", "envd.sock"), ws, filepath.Join(dir, "tmp"), true, spec.env))...)
		cmd.ExtraFiles = []*os.File{readyW}
		cmd.Dir = ws
		for _, kv := range sandboxEnv(ws, filepath.Join(dir, "tmp")) {
			cmd.Env = append(cmd.Env, kv[0]+"="+kv[1])
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	cmd.Stdout = d.stderr
	cmd.Stderr = d.stderr
	// Bounds the wait for the output pipes once the daemon exited, should a
	// sandbox process have inherited them.
	cmd.WaitDelay = time.Second
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: %w", id, err))
	}
	d.cmd, d.pid = cmd, cmd.Process.Pid
	// The cgroup is made while bwrap builds the namespaces (nothing of the
	// sandbox runs before it is placed in it, see above).
	cg, err := p.sandboxCgroup(ctx, id, spec)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	d.cg = cg
	d.record = daemonRecord{
		OwnerPID: os.Getpid(), PID: d.pid, PIDStart: procStart(d.pid), Isolation: d.isolation,
		StartedAt: began.UTC(),
	}
	if cg != nil {
		d.record.CgroupDirs, d.record.Freezer, d.record.CgroupV2 = cg.dirs, cg.freezer, cg.v2
	}
	// Other Providers on this state directory learn from the record how to
	// reach the daemon's processes. Written before the waiter starts, so
	// that its record of the end always comes later.
	if err := writeRecord(dir, d.record); err != nil {
		p.log.Warn("could not record a sandbox daemon for other processes", "id", id, "error", err)
	}
	// From here on the waiter releases the owner lock.
	lockHeld = false
	// The child holds its own copies now; closing ours lets EOF on the ready
	// pipe mean "every process that could write it is gone".
	for _, f := range closeLater {
		if f != blockW {
			_ = f.Close()
		}
	}
	closeLater = nil
	if blockW != nil {
		defer func() { _ = blockW.Close() }()
	}
	go d.wait()

	fail := func(what string, err error) (*daemon, error) {
		// The waiter finishes the cleanup should ctx end first.
		if serr := p.stopDaemon(ctx, d); serr == nil {
			select {
			case <-d.released:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			return nil, ctxError("start sandbox "+id, ctx.Err())
		}
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("start sandbox %s: %s: %w", id, what, err))
	}

	if p.isolation == IsolationBwrap {
		child, err := readInfo(ctx, infoR)
		if err != nil {
			return fail("bwrap did not start the sandbox", p.startFailure(ctx, d, err))
		}
		// A sandbox that died already is not an error here: the ready pipe
		// reports how it died.
		if cg != nil {
			if err := cg.add(d.pid, child); err != nil && !processGone(err) {
				return fail("cgroup", err)
			}
		}
		if p.prlimit {
			if err := setRlimits(child, spec); err != nil && !processGone(err) {
				return fail("rlimits", err)
			}
		}
		_ = blockW.Close() // EOF on the block fd lets the sandbox start
		held = time.Since(began)
	} else if cg != nil {
		if err := cg.add(d.pid); err != nil && !processGone(err) {
			return fail("cgroup", err)
		}
	}
	if err := readReady(ctx, readyR); err != nil {
		return fail("envd did not start", p.startFailure(ctx, d, err))
	}
	p.log.Debug("sandbox daemon started", "id", id, "pid", d.pid, "isolation", d.isolation,
		"namespaces", held, "ready", time.Since(began))
	return d, nil
}

// sandboxCgroup makes sandbox id's cgroup (nil without cgroups). A cgroup
// left by a previous server (its daemon died with it, but unisolated
// processes may live on) is emptied and replaced. No other Provider runs the
// sandbox: the caller holds its owner lock.
func (p *Provider) sandboxCgroup(ctx context.Context, id string, spec sandboxSpec) (*cgroup, error) {
	if p.cgroups == nil {
		return nil, nil
	}
	if err := p.removeStaleCgroup(ctx, id); err != nil {
		return nil, err
	}
	return p.cgroups.create(id, cgroupLimits{memoryBytes: spec.memory, cpus: spec.cpus, pids: spec.pids})
}

// removeStaleCgroup removes sandbox id's cgroup if there is one, killing
// whatever is left in it. The caller makes sure no daemon of the sandbox runs
// (it holds the owner lock, or the sandbox is gone).
func (p *Provider) removeStaleCgroup(ctx context.Context, id string) error {
	if p.cgroups == nil {
		return nil
	}
	if cg := p.cgroups.open(id); cg.exists() {
		return cg.remove(ctx)
	}
	return nil
}

// processGone reports whether err means the process operated on no longer
// exists or is exiting: the kernel refuses to move an exiting task into a
// cgroup with ENODEV, and once the daemon was reaped its waiter removes the
// cgroup (ENOENT; nobody else does while the sandbox is locked).
func processGone(err error) bool {
	return errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.ENODEV) || errors.Is(err, fs.ErrNotExist)
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
	tail := strings.TrimSpace(d.stderr.String())
	if tail == "" {
		return fmt.Errorf("exited with %s and wrote nothing", describeExit(d.exitErr, d.isolation))
	}
	return fmt.Errorf("exited with %s: %s", describeExit(d.exitErr, d.isolation), tail)
}

// wait reaps the daemon, records why it ended, kills whatever is left of the
// sandbox (an unisolated envd's children outlive it) and removes its cgroup,
// then closes done and releases the owner lock: the cgroup is named after
// the sandbox, so it must be gone before another Provider may start the
// sandbox again and make a new one.
func (d *daemon) wait() {
	err := d.cmd.Wait()
	if d.isolation != IsolationBwrap {
		_ = syscall.Kill(-d.pid, syscall.SIGKILL)
	}
	if d.cg != nil {
		_ = d.cg.remove(context.Background())
	}
	d.exitErr, d.endedAt = err, time.Now()
	rec := d.record
	rec.EndedAt, rec.Exit = d.endedAt.UTC(), d.exitDetail()
	// Fails harmlessly when the directory was killed.
	_ = writeRecord(d.dir, rec)
	close(d.done)
	_ = d.lock.Close()
	close(d.released)
}

// stopDaemon kills the sandbox's processes and waits for the daemon to be
// reaped, until ctx ends. reason, when not empty, is what the sandbox's
// detail says afterwards ("daemon stopped: reason").
func (p *Provider) stopDaemon(ctx context.Context, d *daemon, reason ...string) error {
	if !d.alive() {
		return nil
	}
	if len(reason) > 0 {
		d.stopReason.CompareAndSwap(nil, &reason[0])
	}
	killProcs(d.cg, d.pid, d.isolation)
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctxError("stop sandbox daemon", ctx.Err())
	}
}

// killProcs kills the processes of a sandbox daemon: everything in its
// cgroup cg, or without one the process tree at pid (unless under bwrap, see
// below); then pid itself, the outermost process, and without bwrap its
// process group. pid 0 means unknown.
func killProcs(cg *cgroup, pid int, isolation string) {
	if cg != nil {
		cg.kill()
	} else if isolation != IsolationBwrap && pid > 0 {
		// envd starts commands in process groups of their own.
		killTree(pid)
	}
	if pid <= 0 {
		return
	}
	// bwrap's sandbox dies with it: its pid 1 has bwrap as parent-death
	// signal source, and the pid namespace ends with its pid 1.
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if isolation != IsolationBwrap {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// readInfo reads bwrap's --info-fd document and returns the sandbox's first
// process (its pid 1, in this pid namespace's numbering).
func readInfo(ctx context.Context, r *os.File) (int, error) {
	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var info struct {
			ChildPid int `json:"child-pid"`
		}
		// bwrap writes one JSON object; decoding it does not need EOF.
		err := json.NewDecoder(r).Decode(&info)
		if err == nil && info.ChildPid <= 0 {
			err = errors.New("bwrap reported no child pid")
		}
		ch <- result{info.ChildPid, err}
	}()
	select {
	case res := <-ch:
		return res.pid, res.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// readReady waits for envd's "ready <addr>" line on the ready pipe. EOF
// before it means the daemon died at start.
func readReady(ctx context.Context, r *os.File) error {
	ch := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadString('\n')
		switch {
		case strings.HasPrefix(line, "ready "):
			ch <- nil
		case err != nil:
			ch <- err
		default:
			ch <- fmt.Errorf("unexpected line %q on the ready pipe", line)
		}
	}()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rlimitScript sets the sandbox's rlimits and execs the rest of its
// arguments in place: $0 is RLIMIT_NOFILE, $1 RLIMIT_NPROC (dash and busybox
// call it -p, bash -u). Without a value to raise them beyond the server's
// own, lowering limits needs no privilege.
const rlimitScript = `ulimit -n "$0" && { ulimit -p "$1" 2>/dev/null || ulimit -u "$1"; } && shift && exec "$@"`

// rlimitArgs are /bin/sh's arguments to run argv (argv[0] a path, args the
// rest) with spec's rlimits.
func rlimitArgs(spec sandboxSpec, path string, args []string) []string {
	return append([]string{"-c", rlimitScript, strconv.FormatUint(spec.nofile, 10), strconv.FormatInt(spec.pids, 10), path}, args...)
}

// setRlimits applies a sandbox's rlimits to pid, which its processes inherit.
func setRlimits(pid int, spec sandboxSpec) error {
	if err := setRlimit(pid, unix.RLIMIT_NOFILE, spec.nofile); err != nil {
		return err
	}
	return setRlimit(pid, unix.RLIMIT_NPROC, uint64(spec.pids))
}

// setRlimit sets both soft and hard limit of resource on pid. A server that
// may not raise a hard limit (not root) caps the value at its own.
func setRlimit(pid, resource int, value uint64) error {
	if value == 0 {
		return nil
	}
	lim := unix.Rlimit{Cur: value, Max: value}
	err := unix.Prlimit(pid, resource, &lim, nil)
	if errors.Is(err, unix.EPERM) {
		var own unix.Rlimit
		if unix.Getrlimit(resource, &own) == nil && own.Max < value {
			lim = unix.Rlimit{Cur: own.Max, Max: own.Max}
			err = unix.Prlimit(pid, resource, &lim, nil)
		}
	}
	if err != nil {
		return fmt.Errorf("prlimit(%d, %s=%d): %w", pid, rlimitName(resource), value, err)
	}
	return nil
}

func rlimitName(resource int) string {
	switch resource {
	case unix.RLIMIT_NOFILE:
		return "NOFILE"
	case unix.RLIMIT_NPROC:
		return "NPROC"
	}
	return strconv.Itoa(resource)
}

// tailBuffer keeps the last bytes written to it. It is safe for concurrent
// use.
type tailBuffer struct {
	mu    sync.Mutex
	buf   []byte
	limit int
}

func newTailBuffer(limit int) *tailBuffer { return &tailBuffer{limit: limit} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// ctxError turns a context error into a connect error.
func ctxError(what string, err error) error {
	code := connect.CodeCanceled
	if errors.Is(err, context.DeadlineExceeded) {
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, fmt.Errorf("%s: %w", what, err))
}

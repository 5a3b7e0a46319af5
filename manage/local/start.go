//go:build linux

package local

import (
	"bytes"
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
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/internal/envdready"
)

// sandboxSpec is what a daemon is started with, resolved from a
// manage.SandboxConfig and the provider defaults.
type sandboxSpec struct {
	network bool                 // shares the host's network
	egress  manage.NetworkPolicy // an allow policy its proxy enforces, or none
	env     map[string]string
	memory  int64
	cpus    float64
	pids    int64
	nofile  uint64
	// hostID is the sandbox's own host uid and gid (Provider.hostIDs); 0:
	// the provider's shared ones.
	hostID int
	// detached daemons outlive the server that starts them (see
	// detach); the others die with it.
	detached bool
}

// startStage names a point in startDaemon, for Provider.startHook.
type startStage string

// The stages of a start, in order.
const (
	stageBegin      startStage = "begin"      // nothing started yet
	stageStarted    startStage = "started"    // the daemon's first process runs, no cgroup yet
	stageRegistered startStage = "registered" // its cgroup is made, nothing moved into it
	stageConfined   startStage = "confined"   // in its cgroup and let go; envd not ready yet
)

// atStage calls the test hook for stage of sandbox id's start, if any.
func (p *Provider) atStage(ctx context.Context, stage startStage, id string) {
	if p.startHook != nil {
		p.startHook(ctx, stage, id)
	}
}

// credFor is the credential bwrap runs as for a sandbox of spec (nil: the
// server's own).
func (p *Provider) credFor(spec sandboxSpec) *syscall.Credential {
	if spec.hostID != 0 {
		return sandboxCred(spec.hostID)
	}
	return p.cred
}

// ownerFor is the uid and gid the writable directories of a sandbox of spec
// belong to (-1: left as made).
func (p *Provider) ownerFor(spec sandboxSpec) [2]int {
	if spec.hostID != 0 {
		return [2]int{spec.hostID, spec.hostID}
	}
	return p.owner
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
	p.atStage(ctx, stageBegin, id)
	if err := ctx.Err(); err != nil {
		return nil, ctxError("start sandbox "+id, err)
	}
	envdPath, err := p.envd.path()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: %w", id, err))
	}
	files, err := openStartFiles(id, dir, p.isolation == IsolationBwrap)
	if err != nil {
		return nil, err
	}
	defer files.close()
	proxy, err := p.startEgress(id, dir, spec)
	if err != nil {
		return nil, err
	}
	waiting := false
	defer func() {
		if !waiting {
			proxy.close()
		}
	}()

	d := &daemon{egress: proxy,
		isolation: p.isolation, dir: dir, lock: lock, stderr: newTailBuffer(8 << 10),
		done: make(chan struct{}), released: make(chan struct{}), detached: spec.detached,
		hostID: spec.hostID,
	}
	var cmd *exec.Cmd
	if p.isolation == IsolationBwrap {
		if err := writeIdentityFiles(dir); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: the sandbox user's passwd and group files: %w", id, err))
		}
		cmd = p.bwrapCommand(id, dir, envdPath, spec, files)
	} else {
		cmd = unisolatedCommand(dir, envdPath, spec, files)
	}
	cmd.Stdout = d.stderr
	cmd.Stderr = d.stderr
	if spec.detached {
		// A pipe would break (and SIGPIPE the daemon) once this process
		// is gone: a detached daemon writes to a file.
		out, err := os.OpenFile(filepath.Join(dir, daemonLogFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: %w", id, err))
		}
		defer out.Close()
		cmd.Stdout, cmd.Stderr = out, out
		detach(cmd, lock)
	}
	// Bounds the wait for the output pipes once the daemon exited, should a
	// sandbox process have inherited them.
	cmd.WaitDelay = time.Second
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: %w", id, err))
	}
	d.cmd, d.pid = cmd, cmd.Process.Pid
	p.atStage(ctx, stageStarted, id)
	// The cgroup is made while bwrap builds the namespaces (nothing of the
	// sandbox runs before it is placed in it, see above).
	if err := p.registerDaemon(ctx, id, d, spec, began); err != nil {
		return nil, err
	}
	p.atStage(ctx, stageRegistered, id)
	// From here on the waiter releases the owner lock.
	lockHeld = false
	// The child holds its own copies now; closing ours lets EOF on the ready
	// pipe mean "every process that could write it is gone".
	files.closeChildEnds()
	go d.wait()
	waiting = true

	held, err := p.confine(ctx, id, d, spec, files, began)
	if err != nil {
		return nil, err
	}
	p.atStage(ctx, stageConfined, id)
	if err := envdready.Wait(ctx, files.readyR); err != nil {
		return nil, p.abortStart(ctx, id, d, "envd did not start", p.startFailure(ctx, d, err))
	}
	p.log.Debug("sandbox daemon started", "id", id, "pid", d.pid, "isolation", d.isolation,
		"namespaces", held, "ready", time.Since(began))
	return d, nil
}

// startFiles are the descriptors a starting daemon inherits and the
// server's ends of its pipes: the listening control socket, the ready pipe
// envd reports on and, under bwrap only, bwrap's --info-fd, --block-fd and
// --args pipes (nil without bwrap).
type startFiles struct {
	listener       *os.File
	readyR, readyW *os.File
	infoR, infoW   *os.File
	blockR, blockW *os.File
	// argsR is bwrap's --args descriptor: bwrap reads it to EOF (no
	// arguments come) before it forks the sandbox's first process, so
	// until argsW is closed bwrap is one process, and the child it forks
	// once moved into the cgroup starts there.
	argsR, argsW *os.File
	// seccomp is the filter bwrap reads from --seccomp (nil without bwrap
	// or without a filter for this architecture).
	seccomp *os.File
}

// openStartFiles makes the control socket in sandbox id's directory dir and
// the ready pipe, and with bwrap also the info and block pipes. On error
// whatever it made is closed again.
func openStartFiles(id, dir string, bwrap bool) (*startFiles, error) {
	var filter *os.File
	if bwrap {
		var err error
		if filter, err = seccompFile(); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: %w", id, err))
		}
	}
	listener, err := listenControlSocket(dir)
	if err != nil {
		if filter != nil {
			_ = filter.Close()
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: envd socket: %w", id, err))
	}
	f := &startFiles{listener: listener, seccomp: filter}
	if f.readyR, f.readyW, err = os.Pipe(); err == nil && bwrap {
		if f.infoR, f.infoW, err = os.Pipe(); err == nil {
			if f.blockR, f.blockW, err = os.Pipe(); err == nil {
				f.argsR, f.argsW, err = os.Pipe()
			}
		}
	}
	if err != nil {
		f.close()
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return f, nil
}

// closeChildEnds closes the server's copies of the files the started daemon
// inherited: the listener and the ends of the pipes the daemon uses. The
// server keeps readyR, infoR, blockW and argsW.
func (f *startFiles) closeChildEnds() {
	for _, c := range []*os.File{f.readyW, f.listener, f.infoW, f.blockR, f.argsR, f.seccomp} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// close closes every file; closing one closed already does nothing.
func (f *startFiles) close() {
	for _, c := range []*os.File{f.readyR, f.readyW, f.listener, f.infoR, f.infoW, f.blockR, f.blockW, f.argsR, f.argsW, f.seccomp} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// bwrapCommand is the command that runs sandbox id's envd under bwrap, which
// inherits the ready, info and block pipes, the listener (descriptors 3
// to 6, see bwrapListenFD), the seccomp filter (7, see bwrapSeccompFD) and
// then the args pipe (--args, first of its options). With p.prlimit bwrap runs directly and
// startDaemon sets the rlimits on the sandbox's first process; otherwise sh
// sets them before it execs bwrap.
func (p *Provider) bwrapCommand(id, dir, envdPath string, spec sandboxSpec, f *startFiles) *exec.Cmd {
	var cmd *exec.Cmd
	files := []*os.File{f.readyW, f.infoW, f.blockR, f.listener}
	if f.seccomp != nil {
		files = append(files, f.seccomp)
	}
	// bwrap reads --args where it stands: first, before anything else.
	args := append([]string{"--args", strconv.Itoa(3 + len(files))}, p.bwrapArgs(id, dir, envdPath, spec, f.seccomp != nil)...)
	files = append(files, f.argsR)
	if p.prlimit {
		cmd = exec.Command(p.bwrapPath, args...)
	} else {
		cmd = exec.Command("/bin/sh", rlimitArgs(spec, p.bwrapPath, args)...)
	}
	cmd.ExtraFiles = files
	cmd.Dir = "/"
	cmd.Env = []string{}
	// bwrap --die-with-parent ties the sandbox to this process (see
	// the package comment on threads), or to its keeper when detached.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.credFor(spec)}
	return cmd
}

// unisolatedCommand is the command that runs the envd of the sandbox in dir
// without isolation: sh sets the rlimits and execs envd, which inherits the
// ready pipe and the listener (descriptors 3 and 4, see plainListenFD), runs
// in the workspace and dies with the server (parent-death signal) unless
// detached.
func unisolatedCommand(dir, envdPath string, spec sandboxSpec, f *startFiles) *exec.Cmd {
	ws := filepath.Join(dir, "workspace")
	// Go programs restore the NOFILE soft limit they started with in
	// every child they spawn, so a limit set on envd once it runs would
	// not reach its children: envd must start with it.
	cmd := exec.Command("/bin/sh", rlimitArgs(spec, envdPath, envdArgs(fmt.Sprintf("fd:%d", plainListenFD), ws, filepath.Join(dir, "tmp"), true, spec.env))...)
	cmd.ExtraFiles = []*os.File{f.readyW, f.listener}
	cmd.Dir = ws
	for _, kv := range sandboxEnv(ws, filepath.Join(dir, "tmp")) {
		cmd.Env = append(cmd.Env, kv[0]+"="+kv[1])
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// registerDaemon makes the cgroup of sandbox id's just started daemon d
// (nil without cgroups) and records the daemon (daemon.json) for other
// Providers; began is when it was started. When the cgroup cannot be made
// the daemon is killed and reaped, and the error returned.
func (p *Provider) registerDaemon(ctx context.Context, id string, d *daemon, spec sandboxSpec, began time.Time) error {
	cg, err := p.sandboxCgroup(ctx, id, spec)
	if err != nil {
		_ = d.cmd.Process.Kill()
		sweepStart(d)
		_ = d.cmd.Wait()
		// A fork the process started was in flight until it was reaped.
		sweepStart(d)
		return connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
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
	if err := writeRecord(d.dir, d.record); err != nil {
		p.log.Warn("could not record a sandbox daemon for other processes", "id", id, "error", err)
	}
	return nil
}

// confine puts the started daemon d of sandbox id into its cgroup. Under
// bwrap it moves bwrap into the cgroup while bwrap waits on its args pipe,
// then closes that pipe, so the sandbox's first process, forked next,
// starts in the cgroup: one process moved instead of two, while bwrap
// loads. It learns that process from the info pipe, moves it into any
// cgroup directory that does not list it (none: checked, not assumed),
// sets the rlimits with prlimit(2) when p.prlimit, and then lets the
// sandbox start by closing the block pipe;
// held is how long since began bwrap held it (0 without bwrap). On failure
// the daemon is stopped and the error is abortStart's.
func (p *Provider) confine(ctx context.Context, id string, d *daemon, spec sandboxSpec, f *startFiles, began time.Time) (held time.Duration, err error) {
	cg := d.cg
	if p.isolation != IsolationBwrap {
		if cg != nil {
			if err := p.addToCgroup(cg, d); err != nil {
				return 0, p.abortStart(ctx, id, d, "cgroup", err)
			}
		}
		return 0, nil
	}
	// A sandbox that died already is not an error here: the ready pipe
	// reports how it died.
	if cg != nil {
		if err := p.addToCgroup(cg, d); err != nil {
			return 0, p.abortStart(ctx, id, d, "cgroup", err)
		}
	}
	_ = f.argsW.Close() // EOF on the args fd lets bwrap go on
	child, err := readInfo(ctx, f.infoR)
	if err != nil {
		return 0, p.abortStart(ctx, id, d, "bwrap did not start the sandbox", p.startFailure(ctx, d, err))
	}
	if cg != nil {
		if err := cg.addMissing(child); err != nil && !processGone(err) {
			return 0, p.abortStart(ctx, id, d, "cgroup", err)
		}
	}
	if p.prlimit {
		if err := setRlimits(child, spec); err != nil && !processGone(err) {
			return 0, p.abortStart(ctx, id, d, "rlimits", err)
		}
	}
	_ = f.blockW.Close() // EOF on the block fd lets the sandbox start
	return time.Since(began), nil
}

// addToCgroup moves the started daemon d, and more (bwrap's sandbox's
// first process), into cg; a detached daemon's keeper first, then what it
// started (forked before it was moved, or else in cg already). Processes
// that are gone already are no error.
func (p *Provider) addToCgroup(cg *cgroup, d *daemon, more ...int) error {
	if err := cg.add(d.pid); err != nil && !processGone(err) {
		return err
	}
	var rest []int
	if d.detached {
		rest = keeperChildren(d.pid)
	}
	for _, pid := range append(rest, more...) {
		if err := cg.add(pid); err != nil && !processGone(err) {
			return err
		}
	}
	return nil
}

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
// whatever is left in it, and the one its daemon.json names when that is
// elsewhere (a server in another cgroup made it: sandbox cgroups live under
// their server's). The caller makes sure no daemon of the sandbox runs (it
// holds the owner lock, or the sandbox is gone).
func (p *Provider) removeStaleCgroup(ctx context.Context, id string) error {
	if rec, err := readRecord(filepath.Join(p.sandboxesDir, id)); err == nil {
		if cg := rec.cgroup(id); cg != nil && cg.exists() && (p.cgroups == nil || cg.dirs[0] != p.cgroups.open(id).dirs[0]) {
			if err := cg.remove(ctx); err != nil {
				p.log.Warn("could not remove a sandbox cgroup an earlier server made", "id", id, "error", err)
			}
		}
	}
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
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if mark != nil {
			cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil || !bytes.Contains(cmdline, mark) {
				continue
			}
		}
		if st, ok := readStat(pid); !ok || st.state == 'Z' || st.state == 'X' {
			continue
		}
		if procUID(pid) == uid {
			pids = append(pids, pid)
		}
	}
	return pids
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

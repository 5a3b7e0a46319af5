//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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
	// A sandbox that died already is not an error here: the ready pipe
	// reports how it died.
	if cg != nil {
		if err := p.addToCgroup(cg, d); err != nil {
			return 0, p.abortStart(ctx, id, d, "cgroup", err)
		}
	}
	if p.isolation != IsolationBwrap {
		return 0, nil
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

// addToCgroup moves the started daemon d into cg; a detached daemon's
// keeper first, then what it started (forked before it was moved, or else
// in cg already). Processes that are gone already are no error.
func (p *Provider) addToCgroup(cg *cgroup, d *daemon) error {
	if err := cg.add(d.pid); err != nil && !processGone(err) {
		return err
	}
	var rest []int
	if d.detached {
		rest = keeperChildren(d.pid)
	}
	for _, pid := range rest {
		if err := cg.add(pid); err != nil && !processGone(err) {
			return err
		}
	}
	return nil
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

//go:build linux

package local

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/filelock"
)

// Create makes a sandbox directory and starts its daemon. The directory is
// built under a hidden name and renamed into place with its locks held, so
// no other Provider ever sees it half made.
func (p *Provider) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
	if err := p.checkOpen(); err != nil {
		return manage.Sandbox{}, err
	}
	spec, err := p.spec(cfg)
	if err != nil {
		return manage.Sandbox{}, err
	}
	id := newID()
	e := p.entry(id)
	if err := e.acquire(ctx); err != nil {
		p.forget(id)
		return manage.Sandbox{}, ctxError("create sandbox", err)
	}
	defer e.release()
	dir := filepath.Join(p.sandboxesDir, id)
	meta := metadata{ID: id, CreatedAt: time.Now().UTC().Truncate(time.Millisecond), Config: cfg}
	op, owner, err := p.makeDir(id, meta)
	if err != nil {
		p.forget(id)
		return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("create sandbox %s: %w", id, err))
	}
	defer func() { _ = op.Close() }()
	d, err := p.startDaemon(ctx, id, dir, spec, owner)
	if err == nil {
		err = p.setDaemon(ctx, e, d)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		p.forget(id)
		return manage.Sandbox{}, err
	}
	return p.describe(meta, d.isolation, manage.StateRunning, ""), nil
}

// spec resolves cfg against the provider defaults and checks it.
func (p *Provider) spec(cfg manage.SandboxConfig) (sandboxSpec, error) {
	if cfg.Template != "" {
		return sandboxSpec{}, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("the local provider has no templates (got %q): sandboxes use the host's system directories", cfg.Template))
	}
	for k, v := range cfg.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return sandboxSpec{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("environment variable name %q is not valid", k))
		}
		// envd's --env flag splits its value on commas and newlines.
		if strings.ContainsAny(v, ",\n\x00") {
			return sandboxSpec{}, connect.NewError(connect.CodeInvalidArgument,
				fmt.Errorf("environment variable %s: values with commas, newlines or NUL are not supported by the local provider yet", k))
		}
	}
	lim := cfg.Limits
	if lim.MemoryBytes < 0 || lim.CPUs < 0 || lim.Pids < 0 {
		return sandboxSpec{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("negative limits %+v", lim))
	}
	if lim.MemoryBytes == 0 {
		lim.MemoryBytes = p.limits.MemoryBytes
	}
	if lim.CPUs == 0 {
		lim.CPUs = p.limits.CPUs
	}
	if lim.Pids == 0 {
		lim.Pids = p.limits.Pids
	}
	if lim.NoFile == 0 {
		lim.NoFile = p.limits.NoFile
	}
	if p.maxNoFile > 0 && lim.NoFile > p.maxNoFile {
		lim.NoFile = p.maxNoFile
	}
	if p.maxNProc > 0 && uint64(lim.Pids) > p.maxNProc {
		lim.Pids = int64(p.maxNProc)
	}
	return sandboxSpec{
		network: cfg.Network,
		env:     cfg.Env,
		memory:  lim.MemoryBytes,
		cpus:    lim.CPUs,
		pids:    lim.Pids,
		nofile:  lim.NoFile,
	}, nil
}

// makeDir creates a sandbox's directory tree and sandbox.json under a
// hidden name, takes its op and owner locks and renames it into place. The
// directories the sandbox writes belong to its host user.
func (p *Provider) makeDir(id string, meta metadata) (op, owner *os.File, err error) {
	tmp := filepath.Join(p.sandboxesDir, newDirPrefix+id)
	// Exclusive: an id is never reused.
	if err := os.Mkdir(tmp, 0o711); err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			if op != nil {
				_ = op.Close()
			}
			if owner != nil {
				_ = owner.Close()
			}
			_ = os.RemoveAll(tmp)
		}
	}()
	if op, err = filelock.TryLock(filepath.Join(tmp, opLockFile), unix.LOCK_EX); err != nil {
		return nil, nil, err
	}
	if owner, err = filelock.TryLock(filepath.Join(tmp, ownerLockFile), unix.LOCK_EX); err != nil {
		return op, nil, err
	}
	if err = p.prepareSubdirs(tmp); err != nil {
		return op, owner, err
	}
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return op, owner, err
	}
	// A plain write: nobody reads the directory before the rename below.
	if err = os.WriteFile(filepath.Join(tmp, metadataFile), append(data, '\n'), 0o600); err != nil {
		return op, owner, err
	}
	if err = os.Rename(tmp, filepath.Join(p.sandboxesDir, id)); err != nil {
		return op, owner, err
	}
	return op, owner, nil
}

// prepareSubdirs creates (or keeps) workspace, tmp and run and gives them to
// the sandbox's host user. Also run before a restart, since the host user
// may have changed since the sandbox was made.
func (p *Provider) prepareSubdirs(dir string) error {
	for _, sub := range []string{"workspace", "tmp", "run"} {
		path := filepath.Join(dir, sub)
		if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if p.owner[0] >= 0 {
			if err := os.Lchown(path, p.owner[0], p.owner[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Info reports a sandbox's state: running, paused (frozen), stopped (files
// but no daemon) or gone. A sandbox whose directory was removed while this
// Provider's daemon ran is gone, and the daemon is killed. A sandbox another
// Provider runs is running or paused. An invalid id is gone. An error means
// the state could not be learned (ctx ended while another Provider held the
// sandbox).
func (p *Provider) Info(ctx context.Context, id string) (manage.Sandbox, error) {
	s, _, err := p.info(ctx, id)
	return s, err
}

// info is Info, also saying whether the sandbox's directory does not exist
// (never made, or killed).
func (p *Provider) info(ctx context.Context, id string) (s manage.Sandbox, vanished bool, err error) {
	if !validID(id) {
		return manage.Sandbox{ID: id, Provider: Name, State: manage.StateGone, Detail: "not found (not a local sandbox id)"}, true, nil
	}
	e := p.entry(id)
	if err := e.acquire(ctx); err != nil {
		return manage.Sandbox{}, false, ctxError("sandbox "+id, err)
	}
	defer e.release()
	s, vanished, err = p.infoLocked(ctx, id, e)
	if err != nil {
		return manage.Sandbox{}, false, err
	}
	if s.State == manage.StateGone {
		// Asking about ids that do not exist must not grow the map.
		p.forget(id)
	}
	return s, vanished, nil
}

// infoLocked is info with id's entry lock held.
func (p *Provider) infoLocked(ctx context.Context, id string, e *entry) (s manage.Sandbox, vanished bool, err error) {
	dir := filepath.Join(p.sandboxesDir, id)
	if d := e.d; d != nil && d.alive() && !socketRefuses(ctx, filepath.Join(dir, "run", "envd.sock")) {
		meta, err := readMeta(dir)
		if err != nil {
			// The directory went away under a running daemon: kill the
			// orphan so nothing runs for a sandbox that no longer exists.
			p.log.Warn("sandbox directory removed while its daemon ran; killing it", "id", id)
			_ = p.stopDaemon(ctx, d)
			gone, _ := goneInfo(id, dir, err)
			gone.Detail = "directory removed"
			return gone, false, nil
		}
		if how := pauseDetail(d.cg, d.pid); how != "" {
			return p.describe(meta, d.isolation, manage.StatePaused, how), false, nil
		}
		return p.describe(meta, d.isolation, manage.StateRunning, ""), false, nil
	}
	if d := e.d; d != nil && d.alive() {
		// The socket refuses connections: the daemon has died and our
		// wait on it (bwrap exits after envd) is catching up. A client's
		// stream breaks the instant envd dies, so a loss check can arrive
		// here first; wait for the exit rather than report it running.
		select {
		case <-d.done:
		case <-ctx.Done():
			return manage.Sandbox{}, false, ctxError("sandbox "+id, ctx.Err())
		}
	}
	if err := awaitRelease(ctx, e.d); err != nil {
		return manage.Sandbox{}, false, ctxError("sandbox "+id, err)
	}
	meta, err := readMeta(dir)
	if err != nil {
		s, vanished := goneInfo(id, dir, err)
		return s, vanished, nil
	}
	op, err := lockOp(ctx, dir, unix.LOCK_SH, true)
	switch {
	case errors.Is(err, errSandboxGone):
		s, vanished := goneInfo(id, dir, fs.ErrNotExist)
		return s, vanished, nil
	case ctx.Err() != nil:
		return manage.Sandbox{}, false, ctxError("sandbox "+id+" is busy in another process", ctx.Err())
	case err != nil:
		return manage.Sandbox{}, false, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	defer func() { _ = op.Close() }()
	running, err := settledOwnerRunning(ctx, dir)
	switch {
	case errors.Is(err, errSandboxGone):
		s, vanished := goneInfo(id, dir, fs.ErrNotExist)
		return s, vanished, nil
	case ctx.Err() != nil:
		return manage.Sandbox{}, false, ctxError("sandbox "+id, ctx.Err())
	case err != nil:
		return manage.Sandbox{}, false, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	rec, recErr := readRecord(dir)
	if !running {
		isolation, detail, endedAt := p.isolation, "no daemon running", time.Time{}
		switch {
		case recErr == nil && !rec.EndedAt.IsZero():
			isolation, detail, endedAt = rec.Isolation, rec.Exit, rec.EndedAt
		case e.d != nil:
			isolation, detail, endedAt = e.d.isolation, e.d.exitDetail(), e.d.endedAt
		}
		s := p.describe(meta, isolation, manage.StateStopped, detail)
		s.EndedAt = endedAt
		return s, false, nil
	}
	// Another Provider runs it.
	if recErr != nil || !rec.EndedAt.IsZero() {
		// Its owner could not record it: state as far as can be told.
		rec = daemonRecord{Isolation: p.isolation}
	}
	detail := "run by another sandbox-mcp process"
	if rec.OwnerPID > 0 {
		detail = fmt.Sprintf("run by sandbox-mcp process %d", rec.OwnerPID)
	}
	if how := pauseDetail(p.foreignCgroup(id, rec), rec.livePID()); how != "" {
		return p.describe(meta, rec.Isolation, manage.StatePaused, how+"; "+detail), false, nil
	}
	return p.describe(meta, rec.Isolation, manage.StateRunning, detail), false, nil
}

// goneInfo describes a sandbox whose sandbox.json could not be read (err).
// vanished is true when its directory does not exist either.
func goneInfo(id, dir string, err error) (gone manage.Sandbox, vanished bool) {
	gone = manage.Sandbox{ID: id, Provider: Name, State: manage.StateGone, Detail: "not found"}
	if !errors.Is(err, fs.ErrNotExist) {
		gone.Detail = "unreadable sandbox.json: " + err.Error()
		return gone, false
	}
	if _, serr := os.Lstat(dir); serr == nil {
		gone.Detail = "incomplete: no sandbox.json"
		return gone, false
	}
	return gone, true
}

// pauseDetail says how the processes of a running sandbox are paused: its
// cgroup cg (nil: none) frozen, or its outermost process pid (0: unknown)
// stopped with SIGSTOP, by a Provider without a freezer. "" means not paused.
func pauseDetail(cg *cgroup, pid int) string {
	if cg.hasFreezer() {
		if frozen, err := cg.frozen(); err == nil && frozen {
			return "frozen"
		}
	}
	if pid > 0 && pausedTree(pid) {
		return "stopped with SIGSTOP"
	}
	return ""
}

// foreignCgroup is the cgroup of a sandbox another Provider runs: the one its
// record names, else the one this Provider would give it.
func (p *Provider) foreignCgroup(id string, rec daemonRecord) *cgroup {
	if cg := rec.cgroup(id); cg != nil {
		return cg
	}
	if p.cgroups != nil {
		if cg := p.cgroups.open(id); cg.exists() {
			return cg
		}
	}
	return nil
}

// awaitRelease waits until a daemon that ended released the owner lock (at
// once: the waiter does it right after closing done).
func awaitRelease(ctx context.Context, d *daemon) error {
	if d == nil {
		return nil
	}
	select {
	case <-d.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// describe builds the Sandbox for meta.
func (p *Provider) describe(meta metadata, isolation string, state manage.State, detail string) manage.Sandbox {
	if isolation == "" {
		isolation = p.isolation
	}
	s := manage.Sandbox{
		ID:          meta.ID,
		Provider:    Name,
		State:       state,
		Detail:      detail,
		CreatedAt:   meta.CreatedAt,
		Isolation:   isolation,
		Workdir:     insideWorkspace,
		EnvdVersion: envdVersion,
	}
	if isolation == IsolationNone {
		s.Workdir = filepath.Join(p.sandboxesDir, meta.ID, "workspace")
		s.Warnings = []string{noIsolationWarning}
	}
	return s
}

// Endpoint returns the unix socket of a sandbox's envd. It answers for any
// sandbox whose directory exists, running or not, whichever Provider runs
// it: the socket is reachable from every process of the user.
func (p *Provider) Endpoint(ctx context.Context, id string) (manage.Endpoint, error) {
	if err := checkID(id); err != nil {
		return manage.Endpoint{}, err
	}
	if err := ctx.Err(); err != nil {
		return manage.Endpoint{}, ctxError("sandbox "+id, err)
	}
	dir := filepath.Join(p.sandboxesDir, id)
	if _, err := os.Stat(filepath.Join(dir, metadataFile)); err != nil {
		return manage.Endpoint{}, notFound(id)
	}
	return manage.Endpoint{URL: "unix:" + filepath.Join(dir, "run", "envd.sock"), EnvdVersion: envdVersion}, nil
}

// control is a sandbox locked for a change of state: its entry lock and its
// op.lock are held, and it is known who runs it.
type control struct {
	id, dir string
	e       *entry
	op      *os.File
	// own is this Provider's live daemon of the sandbox.
	own *daemon
	// foreign is set when another Provider runs the sandbox; rec is what it
	// recorded (zero when it recorded nothing usable).
	foreign bool
	rec     daemonRecord
	// owner is the owner lock, held when nobody ran the sandbox.
	owner *os.File
}

// control locks sandbox id for a change of state, waiting (until ctx ends)
// for operations of this and other Providers on it. A sandbox whose
// directory does not exist is errSandboxGone. On success the caller must
// call release.
func (p *Provider) control(ctx context.Context, id string) (*control, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	e := p.entry(id)
	if err := e.acquire(ctx); err != nil {
		return nil, ctxError("sandbox "+id, err)
	}
	c := &control{id: id, dir: filepath.Join(p.sandboxesDir, id), e: e}
	ok := false
	defer func() {
		if !ok {
			c.release()
		}
	}()
	op, err := lockOp(ctx, c.dir, unix.LOCK_EX, true)
	switch {
	case errors.Is(err, errSandboxGone):
		if e.d != nil && e.d.alive() {
			p.log.Warn("sandbox directory removed while its daemon ran; killing it", "id", id)
			_ = p.stopDaemon(ctx, e.d)
		}
		return nil, errSandboxGone
	case ctx.Err() != nil:
		return nil, ctxError("sandbox "+id+" is busy in another process", ctx.Err())
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	c.op = op
	if e.d != nil && e.d.alive() {
		c.own, ok = e.d, true
		return c, nil
	}
	if err := awaitRelease(ctx, e.d); err != nil {
		return nil, ctxError("sandbox "+id, err)
	}
	running, err := settledOwnerRunning(ctx, c.dir)
	if ctx.Err() != nil {
		return nil, ctxError("sandbox "+id, ctx.Err())
	}
	var owner *os.File
	if err == nil && !running {
		owner, err = takeOwnership(c.dir)
	} else if err == nil {
		err = filelock.ErrLocked
	}
	switch {
	case err == nil:
		c.owner = owner
	case errors.Is(err, filelock.ErrLocked):
		c.foreign = true
		if rec, err := readRecord(c.dir); err == nil && rec.EndedAt.IsZero() {
			c.rec = rec
		}
	case errors.Is(err, errSandboxGone):
		return nil, errSandboxGone
	default:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	ok = true
	return c, nil
}

// release drops the locks control took.
func (c *control) release() {
	if c.owner != nil {
		_ = c.owner.Close()
	}
	if c.op != nil {
		_ = c.op.Close()
	}
	c.e.release()
}

// procs returns the cgroup and outermost pid (0 if unknown) of the running
// sandbox's processes.
func (p *Provider) procs(c *control) (*cgroup, int) {
	if c.own != nil {
		return c.own.cg, c.own.pid
	}
	return p.foreignCgroup(c.id, c.rec), c.rec.livePID()
}

// Pause freezes every process of a running sandbox: with the cgroup freezer,
// waiting until the kernel reports it frozen, else with SIGSTOP through its
// process tree. Pausing a paused sandbox is a no-op; a stopped one is an
// error (FailedPrecondition), a gone one NotFound.
//
// A sandbox another Provider runs is not paused (FailedPrecondition): the
// freezer would work from here, but that Provider may be using the sandbox,
// and its calls would hang on a frozen daemon it believes running. Its owner
// pauses it when idle; Resume, which only ever lets it run, works from any
// Provider.
func (p *Provider) Pause(ctx context.Context, id string) error {
	c, err := p.control(ctx, id)
	if errors.Is(err, errSandboxGone) {
		return notFound(id)
	}
	if err != nil {
		return err
	}
	defer c.release()
	if _, err := readMeta(c.dir); err != nil {
		return notFound(id)
	}
	switch {
	case c.foreign && c.rec.OwnerPID > 0:
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s is run by sandbox-mcp process %d, which may be using it: only that process pauses it", id, c.rec.OwnerPID))
	case c.foreign:
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s is run by another sandbox-mcp process, which may be using it: only that process pauses it", id))
	case c.own == nil:
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s is stopped: nothing to pause", id))
	}
	cg, pid := c.own.cg, c.own.pid
	if cg.hasFreezer() {
		if err := cg.setFrozen(ctx, true); err != nil {
			// Leave it running rather than half frozen.
			_ = cg.setFrozen(context.Background(), false)
			if ctx.Err() != nil {
				return ctxError("pause sandbox "+id, ctx.Err())
			}
			return connect.NewError(connect.CodeInternal, fmt.Errorf("pause sandbox %s: %w", id, err))
		}
		return nil
	}
	if pausedTree(pid) {
		return nil
	}
	if err := stopTree(ctx, pid); err != nil {
		continueTree(pid)
		if ctx.Err() != nil {
			return ctxError("pause sandbox "+id, err)
		}
		return connect.NewError(connect.CodeInternal, fmt.Errorf("pause sandbox %s: %w", id, err))
	}
	return nil
}

// Resume thaws a paused sandbox, or starts a new daemon for a stopped one on
// its existing files (its processes from before are gone); this Provider
// then runs it. Resuming a running sandbox is a no-op, whichever Provider
// runs it; a gone one is NotFound. Of several Providers resuming a stopped
// sandbox at once, one starts it and the others find it running.
func (p *Provider) Resume(ctx context.Context, id string) error {
	c, err := p.control(ctx, id)
	if errors.Is(err, errSandboxGone) {
		return notFound(id)
	}
	if err != nil {
		return err
	}
	defer c.release()
	meta, err := readMeta(c.dir)
	if err != nil {
		return notFound(id)
	}
	if c.own != nil || c.foreign {
		cg, pid := p.procs(c)
		// A cgroup that vanished belonged to a daemon that just died: the
		// sandbox is about to be stopped, and nothing in it is frozen.
		if cg.hasFreezer() {
			if err := cg.setFrozen(ctx, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
				if ctx.Err() != nil {
					return ctxError("resume sandbox "+id, ctx.Err())
				}
				return connect.NewError(connect.CodeInternal, fmt.Errorf("resume sandbox %s: %w", id, err))
			}
		}
		// Also after a freezer thaw: a Provider without cgroups may have
		// paused it with SIGSTOP.
		if pid != 0 && pausedTree(pid) {
			continueTree(pid)
		}
		return nil
	}
	if err := p.checkOpen(); err != nil {
		return err
	}
	spec, err := p.spec(meta.Config)
	if err != nil {
		return err
	}
	if err := p.prepareSubdirs(c.dir); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("resume sandbox %s: %w", id, err))
	}
	owner := c.owner
	c.owner = nil // the daemon keeps it
	d, err := p.startDaemon(ctx, id, c.dir, spec, owner)
	if err != nil {
		return err
	}
	return p.setDaemon(ctx, c.e, d)
}

// Kill stops a sandbox's processes and deletes its directory. Killing a gone
// sandbox is a no-op. A sandbox another Provider runs is killed through its
// cgroup and recorded pid; that Provider's waiter sees its daemon die and
// lets go of the sandbox. The directory is first renamed away, so the
// sandbox is gone at once; a large tree is deleted in the background if ctx
// ends first.
func (p *Provider) Kill(ctx context.Context, id string) error {
	c, err := p.control(ctx, id)
	if errors.Is(err, errSandboxGone) {
		// Its directory was deleted by hand: nothing can start it again,
		// so whatever is left in its cgroup is an orphan.
		_ = p.removeStaleCgroup(ctx, id)
		p.forget(id)
		return nil
	}
	if err != nil {
		return err
	}
	defer c.release()
	switch {
	case c.own != nil:
		if err := p.stopDaemon(ctx, c.own); err != nil {
			return err
		}
		if err := awaitRelease(ctx, c.own); err != nil {
			return ctxError("kill sandbox "+id, err)
		}
	case c.foreign:
		if err := p.killForeign(ctx, c); err != nil {
			return err
		}
	}
	if c.own != nil || c.owner != nil {
		// A cgroup left by an earlier server may still hold processes;
		// nobody else runs the sandbox now.
		_ = p.removeStaleCgroup(ctx, id)
	}
	trash := filepath.Join(p.sandboxesDir, trashDir)
	_ = os.Mkdir(trash, 0o700)
	doomed := filepath.Join(trash, id+"-"+randomSuffix())
	if err := os.Rename(c.dir, doomed); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			p.forget(id)
			return nil
		}
		return connect.NewError(connect.CodeInternal, fmt.Errorf("kill sandbox %s: %w", id, err))
	}
	p.forget(id)
	removed := make(chan error, 1)
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		removed <- os.RemoveAll(doomed)
	}()
	select {
	case err := <-removed:
		if err != nil {
			p.log.Warn("could not delete a killed sandbox's files", "id", id, "dir", doomed, "error", err)
		}
	case <-ctx.Done():
	}
	return nil
}

// killForeign kills the processes of a sandbox another Provider runs and
// waits (until ctx ends) for that Provider to let go of it. When neither its
// cgroup nor its daemon's pid is known, nothing can be killed from here and
// the sandbox is left alone.
func (p *Provider) killForeign(ctx context.Context, c *control) error {
	cg, pid := p.procs(c)
	if cg == nil && pid == 0 {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("kill sandbox %s: another sandbox-mcp process runs it and did not record its processes", c.id))
	}
	killProcs(cg, pid, c.rec.Isolation)
	owner, err := awaitOwnership(ctx, c.dir)
	switch {
	case err == nil:
		c.owner = owner
	case ctx.Err() != nil:
		// Its processes got SIGKILL; its owner cleans up after them.
		p.log.Warn("the process that ran a killed sandbox did not let go of it in time", "id", c.id, "owner_pid", c.rec.OwnerPID)
	case errors.Is(err, errSandboxGone):
	default:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("kill sandbox %s: %w", c.id, err))
	}
	return nil
}

// List returns every sandbox directory under the state directory with its
// state, whichever Provider runs it. A directory without a readable
// sandbox.json (a crashed Create of an older version) is listed as gone, so
// a reaper can Kill it.
func (p *Provider) List(ctx context.Context) ([]manage.Sandbox, error) {
	entries, err := os.ReadDir(p.sandboxesDir)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list sandboxes: %w", err))
	}
	var out []manage.Sandbox
	for _, de := range entries {
		if !de.IsDir() || !validID(de.Name()) {
			continue
		}
		s, vanished, err := p.info(ctx, de.Name())
		if err != nil {
			return nil, err
		}
		if vanished {
			continue // killed meanwhile
		}
		out = append(out, s)
	}
	return out, nil
}

// Close kills every daemon this provider started and waits for them (until
// ctx ends), keeping their directories: the sandboxes become stopped, as
// after a server restart, and another Provider may resume them. Later calls
// that would start a daemon fail.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var daemons []*daemon
	for _, e := range p.entries {
		if e.d != nil {
			daemons = append(daemons, e.d)
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, d := range daemons {
		if err := p.stopDaemon(ctx, d, closedReason); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := awaitRelease(ctx, d); err != nil {
			errs = append(errs, ctxError("close local provider", err))
		}
	}
	done := make(chan struct{})
	go func() { p.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctxError("close local provider", ctx.Err()))
	}
	return errors.Join(errs...)
}

// closedReason is the detail of a sandbox whose daemon Close stopped.
const closedReason = "the sandbox-mcp process that ran it closed"

func (p *Provider) checkOpen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed()
	}
	return nil
}

func errClosed() error {
	return connect.NewError(connect.CodeFailedPrecondition, errors.New("the local provider is closed"))
}

// entry returns id's entry, creating it.
func (p *Provider) entry(id string) *entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[id]
	if !ok {
		e = &entry{sem: make(chan struct{}, 1)}
		p.entries[id] = e
	}
	return e
}

// setDaemon records e's new daemon; the caller holds e's lock. When the
// Provider was closed while the daemon started, Close did not see it: it is
// stopped here (waiting until ctx ends), as Close would have, and the result
// is FailedPrecondition.
func (p *Provider) setDaemon(ctx context.Context, e *entry, d *daemon) error {
	p.mu.Lock()
	e.d = d
	closed := p.closed
	p.mu.Unlock()
	if !closed {
		return nil
	}
	if err := p.stopDaemon(ctx, d, closedReason); err == nil {
		_ = awaitRelease(ctx, d)
	}
	return errClosed()
}

// forget drops id's entry after its sandbox is gone.
func (p *Provider) forget(id string) {
	p.mu.Lock()
	delete(p.entries, id)
	p.mu.Unlock()
}

func (e *entry) acquire(ctx context.Context) error {
	select {
	case e.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *entry) release() { <-e.sem }

func readMeta(dir string) (metadata, error) {
	data, err := os.ReadFile(filepath.Join(dir, metadataFile))
	if err != nil {
		return metadata{}, err
	}
	var m metadata
	if err := json.Unmarshal(data, &m); err != nil {
		return metadata{}, err
	}
	return m, nil
}

// idAlphabet is E2B's id alphabet: lowercase letters and digits.
const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// newID returns "l" and 15 random characters of idAlphabet.
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (Go 1.24 and later)
	b[0] = 'l'
	for i := 1; i < len(b); i++ {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

// randomSuffix returns 15 random characters of idAlphabet.
func randomSuffix() string { return newID()[1:] }

// validID reports whether id can name a local sandbox: 1 to 64 lowercase
// letters and digits. Checked before any path is built from an id.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func checkID(id string) error {
	if !validID(id) {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("sandbox id %q is not valid: want lowercase letters and digits", id))
	}
	return nil
}

func notFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("sandbox %s not found", id))
}

// socketRefuses reports whether the unix socket at path exists but nothing
// accepts connections on it any more: the daemon behind it has died. A
// socket that accepts, a missing socket file (the directory removed by
// hand, handled by the caller), or any other answer, is not a verdict.
func socketRefuses(ctx context.Context, path string) bool {
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err == nil {
		_ = c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

//go:build linux

package local

import (
	"context"
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

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

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
	if d := e.d; d != nil && d.alive() && !p.socketRefuses(ctx, socketPath(dir)) {
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
	switch {
	case rec.OwnerPID > 0 && !processAlive(rec.OwnerPID):
		// A detached daemon whose starter is gone (detach.go).
		detail = fmt.Sprintf("started by sandbox-mcp process %d, which has ended", rec.OwnerPID)
	case rec.OwnerPID > 0:
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
		Network:     &meta.Config.Network,
	}
	if isolation == IsolationNone {
		s.Workdir = filepath.Join(p.sandboxesDir, meta.ID, "workspace")
		s.Warnings = []string{noIsolationWarning}
	}
	s.Warnings = append(s.Warnings, p.warnings...)
	if isolation == IsolationBwrap && !hasDisk(filepath.Join(p.sandboxesDir, meta.ID)) {
		why := p.diskWhy
		if why == "" {
			why = "it was made without a disk image"
		}
		s.Warnings = append(s.Warnings, noDiskQuotaWarning(why))
	}
	if spec, err := p.spec(meta.Config); err == nil {
		s.Warnings = append(s.Warnings, p.unenforcedLimits(spec)...)
	}
	return s
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

// Endpoint returns the unix socket of a sandbox's envd. It answers for any
// sandbox whose directory exists, running or not, whichever Provider runs
// it: the socket is reachable from every process of the user. The client it
// configures checks the socket's path before every connection
// (checkSocketPath), so it never follows a path a sandbox redirected.
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
	return manage.Endpoint{
		URL:           "unix:" + socketPath(dir),
		EnvdVersion:   envdVersion,
		ClientOptions: []envdclient.Option{envdclient.WithUnixSocketCheck(p.checkSocketPath)},
	}, nil
}

// socketRefuses reports whether the unix socket at path exists but nothing
// accepts connections on it any more: the daemon behind it has died. A
// socket that accepts, a missing socket file (the directory removed by
// hand, handled by the caller), a path checkSocketPath refuses (never
// dialed), or any other answer, is not a verdict.
func (p *Provider) socketRefuses(ctx context.Context, path string) bool {
	if p.checkSocketPath(path) != nil {
		return false
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err == nil {
		_ = c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// unenforcedLimits are warnings for the limits of spec this machine does not
// enforce: a cgroup controller that is missing (no cgroup at all, or one
// the server may not use, such as memory for an unprivileged user without
// delegation).
func (p *Provider) unenforcedLimits(spec sandboxSpec) []string {
	cg := p.cgroups
	if cg == nil {
		why, _, more := strings.Cut(p.caps.CgroupError, "\n")
		if more {
			why += "; …"
		}
		return []string{fmt.Sprintf("Memory, CPU and process-count limits are NOT enforced on this sandbox: it has no cgroup (%s). "+
			"Only rlimits bound it (%d processes per host user, %d open files per process).", why, spec.pids, spec.nofile)}
	}
	var missing []string
	if spec.memory > 0 && !cg.memory {
		missing = append(missing, fmt.Sprintf("memory (%d MiB)", spec.memory>>20))
	}
	if spec.cpus > 0 && !cg.cpu {
		missing = append(missing, fmt.Sprintf("CPU (%g cores)", spec.cpus))
	}
	if spec.pids > 0 && !cg.pids {
		missing = append(missing, fmt.Sprintf("process count (%d; RLIMIT_NPROC still applies)", spec.pids))
	}
	if len(missing) == 0 {
		return nil
	}
	return []string{"These limits are NOT enforced on this sandbox, because its cgroup lacks the controller: " + strings.Join(missing, ", ") + "."}
}

package local

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Create makes a sandbox directory and starts its daemon.
func (p *Provider) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
	if err := p.checkOpen(); err != nil {
		return manage.Sandbox{}, err
	}
	spec, err := p.spec(cfg)
	if err != nil {
		return manage.Sandbox{}, err
	}
	id, err := newID()
	if err != nil {
		return manage.Sandbox{}, connect.NewError(connect.CodeInternal, err)
	}
	dir := filepath.Join(p.sandboxesDir, id)
	meta := metadata{ID: id, CreatedAt: time.Now().UTC().Truncate(time.Millisecond), Config: cfg}
	if err := p.makeDir(dir, meta); err != nil {
		_ = os.RemoveAll(dir)
		return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("create sandbox %s: %w", id, err))
	}
	e := p.entry(id)
	if err := e.acquire(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return manage.Sandbox{}, ctxError("create sandbox", err)
	}
	defer e.release()
	d, err := p.startDaemon(ctx, id, dir, spec)
	if err != nil {
		_ = os.RemoveAll(dir)
		p.forget(id)
		return manage.Sandbox{}, err
	}
	p.setDaemon(e, d)
	return p.describe(meta, d, manage.StateRunning, ""), nil
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

// makeDir creates a sandbox's directory tree and sandbox.json. The
// directories the sandbox writes belong to its host user.
func (p *Provider) makeDir(dir string, meta metadata) error {
	// Exclusive: an id is never reused.
	if err := os.Mkdir(dir, 0o711); err != nil {
		return err
	}
	if err := p.prepareSubdirs(dir); err != nil {
		return err
	}
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".sandbox.json.tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "sandbox.json"))
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
// but no daemon) or gone. A sandbox whose directory was removed while its
// daemon ran is gone, and the daemon is killed. An invalid id is gone.
func (p *Provider) Info(ctx context.Context, id string) (manage.Sandbox, error) {
	if !validID(id) {
		return manage.Sandbox{ID: id, Provider: Name, State: manage.StateGone, Detail: "not found (not a local sandbox id)"}, nil
	}
	e := p.entry(id)
	if err := e.acquire(ctx); err != nil {
		return manage.Sandbox{}, ctxError("sandbox "+id, err)
	}
	defer e.release()
	s := p.infoLocked(ctx, id, e)
	if s.State == manage.StateGone {
		// Asking about ids that do not exist must not grow the map.
		p.forget(id)
	}
	return s, nil
}

func (p *Provider) infoLocked(ctx context.Context, id string, e *entry) manage.Sandbox {
	dir := filepath.Join(p.sandboxesDir, id)
	meta, err := readMeta(dir)
	if err != nil {
		gone := manage.Sandbox{ID: id, Provider: Name, State: manage.StateGone, Detail: "not found"}
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Lstat(dir); serr == nil {
				gone.Detail = "incomplete: no sandbox.json"
			}
		} else {
			gone.Detail = "unreadable sandbox.json: " + err.Error()
		}
		if e.d != nil && e.d.alive() {
			// The directory went away under a running daemon: kill the
			// orphan so nothing runs for a sandbox that no longer exists.
			p.log.Warn("sandbox directory removed while its daemon ran; killing it", "id", id)
			_ = p.stopDaemon(ctx, e.d)
			gone.Detail = "directory removed"
		}
		return gone
	}
	d := e.d
	switch {
	case d == nil:
		return p.describe(meta, nil, manage.StateStopped, "no daemon running")
	case !d.alive():
		return p.describe(meta, d, manage.StateStopped, d.exitDetail())
	case p.paused(d):
		how := "frozen"
		if !d.cg.hasFreezer() {
			how = "stopped with SIGSTOP"
		}
		return p.describe(meta, d, manage.StatePaused, how)
	}
	return p.describe(meta, d, manage.StateRunning, "")
}

// paused reports whether a live daemon's sandbox is frozen or stopped.
func (p *Provider) paused(d *daemon) bool {
	if d.cg.hasFreezer() {
		frozen, err := d.cg.frozen()
		return err == nil && frozen
	}
	return d.stopped
}

// describe builds the Sandbox for meta.
func (p *Provider) describe(meta metadata, d *daemon, state manage.State, detail string) manage.Sandbox {
	isolation := p.isolation
	if d != nil {
		isolation = d.isolation
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
// sandbox whose directory exists, running or not.
func (p *Provider) Endpoint(ctx context.Context, id string) (manage.Endpoint, error) {
	if err := checkID(id); err != nil {
		return manage.Endpoint{}, err
	}
	if err := ctx.Err(); err != nil {
		return manage.Endpoint{}, ctxError("sandbox "+id, err)
	}
	dir := filepath.Join(p.sandboxesDir, id)
	if _, err := os.Stat(filepath.Join(dir, "sandbox.json")); err != nil {
		return manage.Endpoint{}, notFound(id)
	}
	return manage.Endpoint{URL: "unix:" + filepath.Join(dir, "run", "envd.sock"), EnvdVersion: envdVersion}, nil
}

// Pause freezes every process of a running sandbox: with the cgroup freezer,
// waiting until the kernel reports it frozen, else with SIGSTOP through its
// process tree. Pausing a paused sandbox is a no-op; a stopped one is an
// error (FailedPrecondition), a gone one NotFound.
func (p *Provider) Pause(ctx context.Context, id string) error {
	e, d, err := p.live(ctx, id)
	if err != nil {
		return err
	}
	defer e.release()
	if d == nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("sandbox %s is stopped: nothing to pause", id))
	}
	if d.cg.hasFreezer() {
		if err := d.cg.setFrozen(ctx, true); err != nil {
			// Leave it running rather than half frozen.
			_ = d.cg.setFrozen(context.Background(), false)
			if ctx.Err() != nil {
				return ctxError("pause sandbox "+id, ctx.Err())
			}
			return connect.NewError(connect.CodeInternal, fmt.Errorf("pause sandbox %s: %w", id, err))
		}
		return nil
	}
	if !d.stopped {
		d.stopped = true
		if err := stopTree(ctx, d.pid); err != nil {
			continueTree(d.pid)
			d.stopped = false
			if ctx.Err() != nil {
				return ctxError("pause sandbox "+id, err)
			}
			return connect.NewError(connect.CodeInternal, fmt.Errorf("pause sandbox %s: %w", id, err))
		}
	}
	return nil
}

// Resume thaws a paused sandbox, or starts a new daemon for a stopped one on
// its existing files (its processes from before are gone). Resuming a running
// sandbox is a no-op; a gone one is NotFound.
func (p *Provider) Resume(ctx context.Context, id string) error {
	e, d, err := p.live(ctx, id)
	if err != nil {
		return err
	}
	defer e.release()
	if d != nil {
		if d.cg.hasFreezer() {
			if err := d.cg.setFrozen(ctx, false); err != nil {
				if ctx.Err() != nil {
					return ctxError("resume sandbox "+id, ctx.Err())
				}
				return connect.NewError(connect.CodeInternal, fmt.Errorf("resume sandbox %s: %w", id, err))
			}
		}
		if d.stopped {
			continueTree(d.pid)
			d.stopped = false
		}
		return nil
	}
	if err := p.checkOpen(); err != nil {
		return err
	}
	dir := filepath.Join(p.sandboxesDir, id)
	meta, err := readMeta(dir)
	if err != nil {
		return notFound(id)
	}
	spec, err := p.spec(meta.Config)
	if err != nil {
		return err
	}
	if err := p.prepareSubdirs(dir); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("resume sandbox %s: %w", id, err))
	}
	nd, err := p.startDaemon(ctx, id, dir, spec)
	if err != nil {
		return err
	}
	p.setDaemon(e, nd)
	return nil
}

// live locks sandbox id and returns its entry and live daemon (nil when
// stopped). A gone sandbox is a NotFound error. On success the caller must
// release the entry.
func (p *Provider) live(ctx context.Context, id string) (*entry, *daemon, error) {
	if err := checkID(id); err != nil {
		return nil, nil, err
	}
	e := p.entry(id)
	if err := e.acquire(ctx); err != nil {
		return nil, nil, ctxError("sandbox "+id, err)
	}
	s := p.infoLocked(ctx, id, e)
	if s.State == manage.StateGone {
		p.forget(id)
		e.release()
		return nil, nil, notFound(id)
	}
	if e.d != nil && e.d.alive() {
		return e, e.d, nil
	}
	return e, nil, nil
}

// Kill stops a sandbox's processes and deletes its directory. Killing a gone
// sandbox is a no-op. The directory is first renamed away, so the sandbox is
// gone at once; a large tree is deleted in the background if ctx ends first.
func (p *Provider) Kill(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	e := p.entry(id)
	if err := e.acquire(ctx); err != nil {
		return ctxError("kill sandbox "+id, err)
	}
	defer e.release()
	if e.d != nil {
		if err := p.stopDaemon(ctx, e.d); err != nil {
			return err
		}
	}
	dir := filepath.Join(p.sandboxesDir, id)
	if p.cgroups != nil {
		// A cgroup left by an earlier server may still hold processes.
		if cg := p.cgroups.open(id); cg.exists() {
			_ = cg.remove(ctx)
		}
	}
	trash := filepath.Join(p.sandboxesDir, ".trash")
	_ = os.Mkdir(trash, 0o700)
	doomed := filepath.Join(trash, id+"-"+randomSuffix())
	if err := os.Rename(dir, doomed); err != nil {
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

// List returns every sandbox directory under the state directory with its
// state. A directory without a readable sandbox.json (a crashed Create) is
// listed as gone, so a reaper can Kill it.
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
		s, err := p.Info(ctx, de.Name())
		if err != nil {
			return nil, err
		}
		if s.State == manage.StateGone && s.Detail == "not found" {
			continue // killed meanwhile
		}
		out = append(out, s)
	}
	return out, nil
}

// Close kills every daemon this provider started and waits for them (until
// ctx ends), keeping their directories: the sandboxes become stopped, as
// after a server restart. It releases the state directory for another
// Provider. Later calls that would start a daemon fail.
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
		if err := p.stopDaemon(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	done := make(chan struct{})
	go func() { p.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctxError("close local provider", ctx.Err()))
	}
	_ = p.lock.Close()
	return errors.Join(errs...)
}

func (p *Provider) checkOpen() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("the local provider is closed"))
	}
	return nil
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

// setDaemon records e's daemon; the caller holds e's lock.
func (p *Provider) setDaemon(e *entry, d *daemon) {
	p.mu.Lock()
	e.d = d
	p.mu.Unlock()
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
	data, err := os.ReadFile(filepath.Join(dir, "sandbox.json"))
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
func newID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	b[0] = 'l'
	for i := 1; i < len(b); i++ {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b), nil
}

func randomSuffix() string {
	id, err := newID()
	if err != nil {
		return fmt.Sprint(time.Now().UnixNano())
	}
	return id[1:]
}

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

//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
	op, owner, err := p.makeDir(ctx, id, meta, &spec)
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
		if p.hostIDs != nil {
			p.hostIDs.release(context.WithoutCancel(ctx), id, dir)
		}
		_ = removeSandboxDir(dir)
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
	lim = lim.Or(p.limits)
	if p.maxNoFile > 0 && lim.NoFile > p.maxNoFile {
		lim.NoFile = p.maxNoFile
	}
	if p.maxNProc > 0 && uint64(lim.Pids) > p.maxNProc {
		lim.Pids = int64(p.maxNProc)
	}
	shared, allow, err := p.networkSpec(cfg.Network)
	if err != nil {
		return sandboxSpec{}, err
	}
	return sandboxSpec{
		network: shared,
		egress:  allow,
		env:     cfg.Env,
		memory:  lim.MemoryBytes,
		cpus:    lim.CPUs,
		pids:    lim.Pids,
		nofile:  lim.NoFile,
		// A named workspace's sandbox may serve several servers: it
		// outlives the one that starts it. Not under an allow list: its
		// egress proxy runs in the starting server, and a sandbox left
		// without it would lose the hosts it may reach, so it still ends
		// with that server (and restarts with the next).
		detached: cfg.Named && !allow.IsAllow(),
	}, nil
}

// makeDir creates a sandbox's directory tree and sandbox.json under a
// hidden name, takes its op and owner locks, gives it its own host id (into
// spec, with per-sandbox ids) and renames it into place. The directories the
// sandbox writes belong to its host user.
func (p *Provider) makeDir(ctx context.Context, id string, meta metadata, spec *sandboxSpec) (op, owner *os.File, err error) {
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
			if spec.hostID != 0 {
				p.hostIDs.release(context.WithoutCancel(ctx), id, tmp)
			}
			_ = removeSandboxDir(tmp)
		}
	}()
	if op, err = filelock.TryLock(filepath.Join(tmp, opLockFile), unix.LOCK_EX); err != nil {
		return nil, nil, err
	}
	if owner, err = filelock.TryLock(filepath.Join(tmp, ownerLockFile), unix.LOCK_EX); err != nil {
		return op, nil, err
	}
	// The host id (a scan of every process under the allocation lock) and
	// the disk image (a copy and a mount) touch different files of tmp:
	// they are made at the same time.
	type allocation struct {
		uid int
		err error
	}
	var allocated chan allocation
	if p.hostIDs != nil {
		allocated = make(chan allocation, 1)
		go func() {
			uid, err := p.hostIDs.allocate(ctx, id, tmp)
			allocated <- allocation{uid, err}
		}()
	}
	if p.disk != nil {
		if derr := p.disk.create(ctx, tmp); derr != nil {
			// This sandbox goes without a quota, and says so.
			p.log.Warn("could not give a sandbox its disk quota", "id", id, "error", derr)
			unmountVolume(tmp)
			_ = os.Remove(filepath.Join(tmp, volumeDir))
			_ = os.Remove(filepath.Join(tmp, diskImageFile))
		}
	}
	if allocated != nil {
		a := <-allocated
		if spec.hostID, err = a.uid, a.err; err != nil {
			return op, owner, err
		}
	}
	if err = p.prepareSubdirs(tmp, p.ownerFor(*spec)); err != nil {
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
// the sandbox's host user, owner (-1: left alone). Also run before a
// restart, since the host user may have changed since the sandbox was made.
func (p *Provider) prepareSubdirs(dir string, owner [2]int) error {
	for _, sub := range sandboxSubdirs {
		path := subdirPath(dir, sub)
		if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if owner[0] >= 0 {
			if err := os.Lchown(path, owner[0], owner[1]); err != nil {
				return err
			}
		}
	}
	if hasDisk(dir) {
		return linkSubdirs(dir)
	}
	return nil
}

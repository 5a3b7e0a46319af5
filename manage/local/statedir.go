//go:build linux

package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// prepareStateDir creates the state and sandboxes directories and checks
// they are writable. With drop (bwrap runs as an unprivileged host user) they
// are made searchable by that user, not listable: 0711 for sandboxes, and
// search permission added for the state directory, which another component
// (the workspace store) may have created 0700.
func (p *Provider) prepareStateDir(drop bool) error {
	for _, dir := range []string{p.stateDir, p.sandboxesDir} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return fmt.Errorf("local provider: state directory %s: %w", dir, err)
		}
		if !drop {
			continue
		}
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("local provider: state directory %s: %w", dir, err)
		}
		want := fi.Mode().Perm() | 0o011
		if dir == p.sandboxesDir {
			want = 0o711
		}
		if fi.Mode().Perm() != want {
			if err := os.Chmod(dir, want); err != nil {
				return fmt.Errorf("local provider: state directory %s: %w", dir, err)
			}
		}
	}
	f, err := os.CreateTemp(p.sandboxesDir, ".probe-*")
	if err != nil {
		return fmt.Errorf("local provider: state directory %s is not writable: %w", p.stateDir, err)
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return nil
}

// reapLeftovers kills what a previous server left running of this state
// directory's sandboxes and unmounts their disk images, so that a stopped
// sandbox really runs and holds nothing: processes in their cgroups
// (unisolated sandboxes' processes outlive their envd), processes of a start
// that server was killed in the middle of (not in the cgroup yet, see
// sweepStart), and volumes its daemons' waiters never unmounted. Sandboxes
// that another live Provider runs, or acts on right now, are left alone.
func (p *Provider) reapLeftovers(ctx context.Context) error {
	entries, err := os.ReadDir(p.sandboxesDir)
	if err != nil {
		return fmt.Errorf("local provider: state directory %s: %w", p.stateDir, err)
	}
	uid := os.Geteuid()
	if p.cred != nil {
		uid = int(p.cred.Uid)
	}
	procs := liveProcesses() // one look at /proc for every sandbox
	for _, de := range entries {
		id := de.Name()
		if !validID(id) || !de.IsDir() {
			continue
		}
		dir := filepath.Join(p.sandboxesDir, id)
		var cg *cgroup
		if p.cgroups != nil {
			if cg = p.cgroups.open(id); !cg.exists() {
				cg = nil
			}
		}
		sandboxUID, byUID := uid, false
		if p.hostIDs != nil {
			if hostID, ok := p.hostIDs.recorded(dir); ok {
				sandboxUID, byUID = hostID, true
			}
		}
		stray := len(matchProcesses(procs, sandboxUID, []byte(dir+"/"))) > 0
		if cg == nil && !stray && !mounted(dir, filepath.Join(dir, volumeDir)) {
			continue
		}
		op, err := lockOp(ctx, dir, unix.LOCK_EX, false)
		if err != nil {
			continue // busy in another Provider, or killed meanwhile
		}
		if owner, err := takeOwnership(dir); err == nil {
			if cg != nil {
				p.log.Info("killing what a previous server left of a sandbox", "id", id, "processes", len(cg.procs()))
				if err := cg.remove(ctx); err != nil {
					p.log.Warn("could not remove a stale sandbox cgroup", "id", id, "error", err)
				}
			}
			if stray {
				p.log.Info("killing the processes of a sandbox start a previous server did not finish", "id", id)
				sweepProcesses(dir, sandboxUID, byUID)
			}
			unmountVolume(dir)
			_ = owner.Close()
		}
		_ = op.Close()
	}
	return nil
}

// removeTrash deletes, in the background, what killed sandboxes left when
// their deletion was cut short, and sandbox directories whose creation never
// finished (a server that died in Create).
func (p *Provider) removeTrash() {
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		trash := filepath.Join(p.sandboxesDir, trashDir)
		entries, _ := os.ReadDir(trash)
		for _, de := range entries {
			_ = removeSandboxDir(filepath.Join(trash, de.Name()))
		}
		entries, _ = os.ReadDir(p.sandboxesDir)
		for _, de := range entries {
			if !strings.HasPrefix(de.Name(), newDirPrefix) {
				continue
			}
			// A creator holds op.lock from right after making the
			// directory; the age covers the moment before.
			dir := filepath.Join(p.sandboxesDir, de.Name())
			if fi, err := de.Info(); err != nil || time.Since(fi.ModTime()) < staleNewDirAge {
				continue
			}
			op, err := lockOp(context.Background(), dir, unix.LOCK_EX, false)
			if err != nil {
				continue
			}
			_ = removeSandboxDir(dir)
			_ = op.Close()
		}
	}()
}

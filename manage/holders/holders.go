// Package holders counts, across processes, the servers that hold a
// workspace: each holder keeps an exclusive flock on a file of its own in
// the workspace's directory, so the kernel lets go of a holder that dies
// (even of SIGKILL) and no count goes stale.
package holders

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/manage/filelock"
)

// lockSuffix ends the name of a holder's file; files being made have a
// leading dot and are not counted.
const lockSuffix = ".hold"

// Dir keeps holder files under one directory (STATE-DIR/holders): one
// subdirectory per workspace key, one locked file per holder. It implements
// manage.Holders and is safe for concurrent use.
type Dir struct {
	root string

	mu   sync.Mutex
	mine map[string]bool // paths of this Dir's own holder files
}

// New returns a Dir keeping its files under root, which it creates.
func New(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("holders: %w", err)
	}
	return &Dir{root: root, mine: map[string]bool{}}, nil
}

// keyDir is key's directory under the root.
func (d *Dir) keyDir(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(d.root, hex.EncodeToString(sum[:12]))
}

// Hold registers a holder of key until release is called or the process
// ends. The file is made and locked under a hidden name, then renamed into
// place, so a file others count is always locked while its holder lives.
func (d *Dir) Hold(key string) (release func(), err error) {
	dir := d.keyDir(key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("holders: %w", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("%d-%s%s", os.Getpid(), hex.EncodeToString(b[:]), lockSuffix)
	tmp := filepath.Join(dir, "."+name)
	f, err := filelock.TryLock(tmp, filelock.Exclusive)
	if err != nil {
		return nil, fmt.Errorf("holders: %w", err)
	}
	path := filepath.Join(dir, name)
	if err := os.Rename(tmp, path); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("holders: %w", err)
	}
	d.mu.Lock()
	d.mine[path] = true
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			delete(d.mine, path)
			d.mu.Unlock()
			_ = os.Remove(path)
			_ = f.Close()
		})
	}, nil
}

// Others reports whether a holder other than this Dir's own holds key. Files
// of holders that died are removed on the way.
func (d *Dir) Others(key string) (bool, error) {
	dir := d.keyDir(key)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("holders: %w", err)
	}
	found := false
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, lockSuffix) {
			continue
		}
		path := filepath.Join(dir, name)
		d.mu.Lock()
		own := d.mine[path]
		d.mu.Unlock()
		if own {
			continue
		}
		f, err := filelock.TryLock(path, filelock.Shared)
		switch {
		case errors.Is(err, filelock.ErrLocked):
			found = true
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return false, fmt.Errorf("holders: %w", err)
		default:
			// Its holder died: nobody can take this file again.
			_ = os.Remove(path)
			_ = f.Close()
		}
	}
	return found, nil
}

//go:build linux

package local

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
	"github.com/sandbox-mcp/sandbox-mcp/manage/internal/contentfile"
)

// When the server runs as root, bwrap runs as an unprivileged host user
// (Config.HostUID), which must be able to search every directory on the way
// to what bwrap binds: the sandbox directories and the envd binary. The state
// directory and its sandboxes directory are made searchable (0711, not
// listable); a binary that user cannot reach (under /root/go/bin, say) is
// copied into the state directory, under a name from its content hash.

// The lean envd this binary embeds (package envdbin), when it carries one
// for the host's architecture, is what sandboxes run unless Config.EnvdBinary
// names another binary: it is written once into the state directory's bin
// directory (0711) under a name from its content hash (0755), where the
// sandbox user reaches it like a copy.

// copyPrefix starts the name of an installed copy of the envd binary, and
// embeddedPrefix that of an installed embedded lean envd.
const (
	copyPrefix     = "sandbox-mcp-"
	embeddedPrefix = "sandbox-envd-"
)

// Installed copies not used for this long are removed by the next Provider
// that starts; a Provider that still needs one installs it again.
const (
	staleCopyAge = 24 * time.Hour
	staleTempAge = time.Hour
)

// envdExecutable is the envd binary sandboxes run. It is safe for
// concurrent use.
type envdExecutable struct {
	// source is Config.EnvdBinary (the installed embedded envd by default);
	// unisolated sandboxes run it directly.
	source string
	// embedded is the lean envd installed at source, or nil when source is
	// a binary of its own.
	embedded *envdbin.Envd
	// binDir is <state>/bin when bwrap sandboxes run a copy, else "".
	binDir string

	mu      sync.Mutex
	current string // what bwrap binds: source, or the copy in binDir
}

// path returns the binary a sandbox runs: under bwrap the one to bind,
// else source. An installed embedded envd or a copy that another Provider
// removed meanwhile is installed again.
func (b *envdExecutable) path() (string, error) {
	if b.binDir == "" && b.embedded == nil {
		return b.source, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.embedded != nil {
		if _, err := os.Stat(b.source); err != nil {
			if _, err := installEmbedded(filepath.Dir(b.source), b.embedded); err != nil {
				return "", fmt.Errorf("install the embedded envd in %s: %w", filepath.Dir(b.source), err)
			}
		}
	}
	if b.binDir == "" {
		return b.source, nil
	}
	if _, err := os.Stat(b.current); err == nil {
		return b.current, nil
	}
	p, err := installCopy(b.binDir, b.source)
	if err != nil {
		return "", fmt.Errorf("install a copy of the envd binary %s in %s: %w", b.source, b.binDir, err)
	}
	b.current = p
	return p, nil
}

// unreachable explains why user uid/gid cannot reach path: the first
// directory on the way that it may not search, or (for a file, when file is
// true) the file itself when it may not read and execute it. It returns nil
// when the path is reachable. Directories that do not exist yet are skipped:
// they are created searchable. Permissions only; ACLs and security modules
// are left to the bwrap probe.
func unreachable(path string, uid, gid int, file bool) error {
	resolved := resolveExisting(path)
	var dirs []string
	for d := filepath.Dir(resolved); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		fi, err := os.Stat(dirs[i])
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return err
		}
		if !permits(fi, uid, gid, 0o1) {
			return &unreachableError{Path: dirs[i], Mode: fi.Mode().Perm(), Owner: ownerUID(fi), UID: uid}
		}
	}
	if file {
		fi, err := os.Stat(resolved)
		if err != nil {
			return err
		}
		if !permits(fi, uid, gid, 0o5) {
			return &unreachableError{Path: resolved, Mode: fi.Mode().Perm(), Owner: ownerUID(fi), UID: uid, File: true}
		}
	}
	return nil
}

// unreachableError names what keeps a user from a path.
type unreachableError struct {
	Path  string      // the directory it cannot search, or the file
	Mode  fs.FileMode // its permission bits
	Owner int         // its owner
	UID   int         // the user
	File  bool        // Path is the file itself, not a directory on the way
}

func (e *unreachableError) Error() string {
	if e.File {
		return fmt.Sprintf("%s (mode %04o, owner uid %d) is not readable and executable by uid %d", e.Path, e.Mode, e.Owner, e.UID)
	}
	return fmt.Sprintf("%s (mode %04o, owner uid %d) is not searchable by uid %d", e.Path, e.Mode, e.Owner, e.UID)
}

// resolveExisting resolves the symbolic links of the longest existing prefix
// of path and appends the rest.
func resolveExisting(path string) string {
	var rest []string
	for p := path; ; {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{r}, rest...)...)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return path
		}
		rest = append([]string{filepath.Base(p)}, rest...)
		p = parent
	}
}

// permits reports whether uid/gid (with no supplementary groups, as bwrap
// runs) has the access bits want (octal 0-7, as for "other") on fi.
func permits(fi fs.FileInfo, uid, gid int, want fs.FileMode) bool {
	perm := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return perm&want == want
	case int(st.Uid) == uid:
		return (perm>>6)&want == want
	case int(st.Gid) == gid:
		return (perm>>3)&want == want
	}
	return perm&want == want
}

func ownerUID(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// copyPath returns where installCopy puts src: binDir/sandbox-mcp-<the first
// 16 hex digits of its SHA-256>.
func copyPath(binDir, src string) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return filepath.Join(binDir, copyName(h)), nil
}

func copyName(h hash.Hash) string {
	return copyPrefix + hex.EncodeToString(h.Sum(nil))[:16]
}

// installCopy copies src into binDir (mode 0755) under a name from its
// content hash and returns the copy's path; an existing copy is reused.
// Several Providers may install at once: each writes a temporary file and
// renames it into place, and the copies are identical.
func installCopy(binDir, src string) (string, error) {
	if err := os.Mkdir(binDir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	dst, err := copyPath(binDir, src)
	if err != nil {
		return "", err
	}
	if fi, err := os.Lstat(dst); err == nil && fi.Mode().IsRegular() {
		return dst, nil
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer func() { _ = in.Close() }()
	// Named after what was copied, which differs from the hash above if the
	// binary was replaced in between.
	return contentfile.Write(binDir, copyPrefix, in)
}

// embeddedPath returns where installEmbedded puts e: binDir/sandbox-envd-<the
// first 16 hex digits of its SHA-256>.
func embeddedPath(binDir string, e *envdbin.Envd) string {
	return filepath.Join(binDir, embeddedPrefix+e.SHA256[:16])
}

// installEmbedded writes the embedded envd e into binDir (mode 0755) at
// embeddedPath and returns that path; an existing file there is reused, so
// it is written once per state directory. Several Providers may install at
// once, as for installCopy.
func installEmbedded(binDir string, e *envdbin.Envd) (string, error) {
	if err := os.Mkdir(binDir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	dst := embeddedPath(binDir, e)
	if fi, err := os.Lstat(dst); err == nil && fi.Mode().IsRegular() {
		return dst, nil
	}
	return contentfile.Write(binDir, embeddedPrefix, bytes.NewReader(e.Data))
}

// removeOldCopies marks keep as in use and deletes other copies and
// installed embedded envds nobody installed or marked for staleCopyAge, and
// temporary files of installs that did not finish. Sandboxes that run a deleted copy are unaffected (the
// file stays bound in their mount namespace).
func removeOldCopies(binDir, keep string) {
	now := time.Now()
	_ = os.Chtimes(keep, now, now)
	entries, err := os.ReadDir(binDir)
	if err != nil {
		return
	}
	for _, de := range entries {
		name := de.Name()
		path := filepath.Join(binDir, name)
		if path == keep {
			continue
		}
		age := staleCopyAge
		switch {
		case strings.HasPrefix(name, copyPrefix), strings.HasPrefix(name, embeddedPrefix):
		case (strings.HasPrefix(name, "."+copyPrefix) || strings.HasPrefix(name, "."+embeddedPrefix)) && strings.HasSuffix(name, ".tmp"):
			age = staleTempAge
		default:
			continue
		}
		if fi, err := de.Info(); err == nil && now.Sub(fi.ModTime()) > age {
			_ = os.Remove(path)
		}
	}
}

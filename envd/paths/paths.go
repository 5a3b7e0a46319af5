// Package paths turns the paths clients send to envd into host paths.
//
// The rules follow E2B's envd, with one change: relative paths resolve
// against the daemon's root (the workspace) rather than the user's home.
//
//   - "" is the root itself.
//   - "~" and "~/x" expand to the user's home; "~other" is refused.
//   - A relative path is joined to the root; an absolute path is kept.
//   - Every result is cleaned; a NUL byte is refused.
//
// With confinement on, the path with every symlink resolved (the last
// component included, and dangling links followed as far as they go) must
// lie inside the root. Resolve still returns the lexical path, so operations
// such as Stat and Remove act on a link itself and not on its target.
// Confinement is a guard for unisolated sandboxes, not a security boundary:
// a link swapped after the check is not caught. Namespaces are the boundary.
package paths

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
)

// ErrInvalid marks a path that cannot be resolved at all (NUL byte, "~user").
var ErrInvalid = errors.New("invalid path")

// ErrOutside marks a path that resolves outside the root under confinement.
var ErrOutside = errors.New("path is outside the sandbox root")

// maxLinks bounds symlink resolution, as the kernel's ELOOP limit does.
const maxLinks = 40

// Error describes a path that was refused. It wraps ErrInvalid or ErrOutside.
type Error struct {
	Path   string // the path as the client sent it
	Reason string // why it was refused, for people
	kind   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("path %q: %s", e.Path, e.Reason)
}

// Unwrap returns ErrInvalid or ErrOutside.
func (e *Error) Unwrap() error { return e.kind }

// Resolver resolves client paths. It is safe for concurrent use.
type Resolver struct {
	root     string // absolute, cleaned
	realRoot string // root with symlinks resolved, for containment checks
	confine  bool
}

// New returns a Resolver for root. root is made absolute; it must exist and be
// a directory. With confine set, every resolved path must stay inside root.
func New(root string, confine bool) (*Resolver, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("root %q: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("root %q: %w", root, err)
	}
	info, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("root %q: %w", root, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("root %q is not a directory", root)
	}
	return &Resolver{root: abs, realRoot: real, confine: confine}, nil
}

// Root returns the absolute root directory.
func (r *Resolver) Root() string { return r.root }

// Confined reports whether paths must stay inside the root.
func (r *Resolver) Confined() bool { return r.confine }

// Resolve maps p, sent by a client acting as u, to a cleaned absolute path.
// Errors are *Error values wrapping ErrInvalid or ErrOutside.
func (r *Resolver) Resolve(p string, u identity.User) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", &Error{Path: p, Reason: "contains a NUL byte", kind: ErrInvalid}
	}
	var abs string
	switch {
	case p == "":
		abs = r.root
	case p == "~" || strings.HasPrefix(p, "~/"):
		home := u.Home
		if home == "" {
			home = r.root
		}
		abs = filepath.Join(home, strings.TrimPrefix(p[1:], "/"))
	case strings.HasPrefix(p, "~"):
		return "", &Error{Path: p, Reason: "only ~ and ~/ are supported, not ~user", kind: ErrInvalid}
	case filepath.IsAbs(p):
		abs = filepath.Clean(p)
	default:
		abs = filepath.Join(r.root, p)
	}
	if r.confine {
		if err := r.check(p, abs); err != nil {
			return "", err
		}
	}
	return abs, nil
}

// check fails unless abs, with every symlink resolved, is inside the root.
func (r *Resolver) check(orig, abs string) error {
	real, err := resolveLinks(abs)
	if err != nil {
		return &Error{Path: orig, Reason: err.Error(), kind: ErrInvalid}
	}
	if !within(r.realRoot, real) {
		reason := "resolves outside the sandbox root " + r.root
		if real != abs {
			reason = fmt.Sprintf("resolves (through symlinks) to %s, outside the sandbox root %s", real, r.root)
		}
		return &Error{Path: orig, Reason: reason, kind: ErrOutside}
	}
	return nil
}

// within reports whether p is root or below it. Both must be clean and absolute.
func within(root, p string) bool {
	if p == root {
		return true
	}
	if root == "/" {
		return true
	}
	return strings.HasPrefix(p, root+"/")
}

// resolveLinks returns abs with every symlink resolved, component by
// component. Components that do not exist are kept as they are, so a path to a
// file about to be created resolves too. A dangling link is followed to its
// (missing) target.
func resolveLinks(abs string) (string, error) {
	links := 0
	done := "/"
	rest := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, name)
		info, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || isNotDir(err) {
				// Nothing below a missing component can be a link we would follow.
				return filepath.Join(append([]string{next}, rest...)...), nil
			}
			return "", err
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		links++
		if links > maxLinks {
			return "", errors.New("too many levels of symbolic links")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			done = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return done, nil
}

func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }

package tools

import (
	"context"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// maxLinkHops bounds symlink resolution, like the kernel's ELOOP limit.
const maxLinkHops = 40

// pathResolver maps the model's workspace-relative paths to absolute paths
// in the sandbox, refusing anything that leaves the workspace: "..", an
// absolute path elsewhere, or a symlink (checked through envd) that points
// outside. It remembers what envd said of each path it examined (entries and
// misses) for the rest of the call: a call that changes the workspace and
// then resolves again uses a new resolver.
type pathResolver struct {
	c    *Call
	root string // the workspace root inside the sandbox
	cli  *envdclient.Client
	seen map[string]seenPath // absolute path → what Stat said (links not followed)
}

// seenPath is what the resolver learned of one path.
type seenPath struct {
	entry   envdclient.Entry
	missing bool
}

func newPathResolver(c *Call, root string, cli *envdclient.Client) *pathResolver {
	return &pathResolver{c: c, root: path.Clean(root), cli: cli, seen: map[string]seenPath{}}
}

// resolved is a checked path.
type resolved struct {
	// abs is the lexical absolute path: what acts on a symlink itself.
	abs string
	// real is abs with every symlink resolved.
	real string
	// entry is what real is, when exists.
	entry  envdclient.Entry
	exists bool
}

// within reports whether p (clean, absolute) is the root or below it.
func (r *pathResolver) within(p string) bool {
	return p == r.root || r.root == "/" || strings.HasPrefix(p, r.root+"/")
}

// lexical resolves p without touching the sandbox. empty is the root.
func (r *pathResolver) lexical(field, p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", inputErr(field, "path %q contains a NUL byte", p)
	}
	var abs string
	if path.IsAbs(p) {
		abs = path.Clean(p)
	} else {
		abs = path.Join(r.root, p)
	}
	if !r.within(abs) {
		if path.IsAbs(p) {
			return "", inputErr(field, "path %q is outside the workspace %s; give a path relative to the workspace", p, r.root)
		}
		return "", inputErr(field, "path %q leaves the workspace (through ..); give a path inside it", p)
	}
	return abs, nil
}

// resolve checks p: lexically, then every existing component through envd,
// refusing a symlink whose target lies outside the workspace. It returns
// the lexical path, the path with links resolved and what that is. On an
// error, abs is set when p passed the lexical check. Errors of the sandbox
// come back through Call.Check.
func (r *pathResolver) resolve(ctx context.Context, field, p string) (resolved, error) {
	abs, err := r.lexical(field, p)
	if err != nil {
		return resolved{}, err
	}
	res := resolved{abs: abs}
	if res.real, err = r.follow(ctx, field, p, abs); err != nil {
		return res, r.c.Check(err)
	}
	if res.entry, res.exists, err = r.stat(ctx, res.real); err != nil {
		return res, r.c.Check(err)
	}
	return res, nil
}

// stat returns what p (clean, absolute) is, links not followed, and whether
// it exists: from what the resolver saw when it can tell (below a missing
// path nothing exists), else from envd. Errors are envd's, unchecked.
func (r *pathResolver) stat(ctx context.Context, p string) (envdclient.Entry, bool, error) {
	if e, exists, known := r.known(p); known {
		return e, exists, nil
	}
	e, err := r.cli.Stat(ctx, p)
	if envdclient.IsNotFound(err) {
		r.seen[p] = seenPath{missing: true}
		return envdclient.Entry{}, false, nil
	}
	if err != nil {
		return envdclient.Entry{}, false, err
	}
	r.seen[p] = seenPath{entry: e}
	return e, true, nil
}

// known is stat without asking envd; known is false when the resolver
// cannot tell.
func (r *pathResolver) known(p string) (e envdclient.Entry, exists, known bool) {
	if s, ok := r.seen[p]; ok {
		return s.entry, !s.missing, true
	}
	for q := path.Dir(p); ; q = path.Dir(q) {
		if s, ok := r.seen[q]; ok && s.missing {
			return envdclient.Entry{}, false, true
		}
		if q == "/" || q == "." {
			return envdclient.Entry{}, false, false
		}
	}
}

// follow returns abs with every symlink resolved, failing when a link leads
// outside the workspace. Below a missing component it stops: nothing there
// exists to be a link.
func (r *pathResolver) follow(ctx context.Context, field, orig, abs string) (string, error) {
	rest := strings.Split(strings.TrimPrefix(strings.TrimPrefix(abs, r.root), "/"), "/")
	cur := r.root
	hops := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = path.Dir(cur)
			if !r.within(cur) {
				return "", inputErr(field, "path %q resolves outside the workspace %s", orig, r.root)
			}
			continue
		}
		next := path.Join(cur, name)
		e, exists, err := r.stat(ctx, next)
		if connect.CodeOf(err) == connect.CodePermissionDenied {
			// A daemon that confines paths itself (envd --confine)
			// refuses a link that leads outside before we see it.
			return "", inputErr(field, "path %q resolves (through a symlink) outside the workspace; refused", orig)
		}
		if err != nil {
			return "", err
		}
		if !exists {
			return path.Join(append([]string{next}, rest...)...), nil
		}
		if e.Type != envdclient.TypeSymlink {
			cur = next
			continue
		}
		hops++
		if hops > maxLinkHops {
			return "", inputErr(field, "path %q has too many levels of symbolic links", orig)
		}
		target := e.SymlinkTarget
		if target == "" {
			target = "."
		}
		var resolved string
		if path.IsAbs(target) {
			resolved = path.Clean(target)
		} else {
			resolved = path.Join(cur, target)
		}
		if !r.within(resolved) {
			return "", inputErr(field, "path %q goes through the symlink %s, which points to %s outside the workspace; refused", orig, r.rel(next), target)
		}
		// Continue from the link's target with whatever is left.
		rel := strings.TrimPrefix(strings.TrimPrefix(resolved, r.root), "/")
		rest = append(strings.Split(rel, "/"), rest...)
		cur = r.root
	}
	return cur, nil
}

// rel returns abs relative to the workspace root ("." for the root).
func (r *pathResolver) rel(abs string) string { return relPath(r.root, abs) }

// relPath returns abs relative to the workspace root root ("." for the
// root), for messages; a path outside it is returned as is.
func relPath(root, abs string) string {
	root = path.Clean(root)
	if abs == root {
		return "."
	}
	if root == "/" {
		return strings.TrimPrefix(abs, "/")
	}
	if s, ok := strings.CutPrefix(abs, root+"/"); ok {
		return s
	}
	return abs
}

package tools

import (
	"context"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/client"
)

// maxLinkHops bounds symlink resolution, like the kernel's ELOOP limit.
const maxLinkHops = 40

// pathResolver maps the model's workspace-relative paths to absolute paths
// in the sandbox, refusing anything that leaves the workspace: "..", an
// absolute path elsewhere, or a symlink (checked through envd) that points
// outside. It caches what it learned for the rest of the call.
type pathResolver struct {
	root  string // the workspace root inside the sandbox
	cli   *client.Client
	links map[string]string // absolute path → resolved target, or "" when not a link
}

func newPathResolver(root string, cli *client.Client) *pathResolver {
	return &pathResolver{root: path.Clean(root), cli: cli, links: map[string]string{}}
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

// resolve is lexical plus the symlink check: every existing component is
// examined, and a link whose target lies outside the workspace is refused.
// It returns the lexical path (operations act on links themselves).
func (r *pathResolver) resolve(ctx context.Context, field, p string) (string, error) {
	abs, err := r.lexical(field, p)
	if err != nil {
		return "", err
	}
	if _, err := r.follow(ctx, field, p, abs); err != nil {
		return "", err
	}
	return abs, nil
}

// follow returns abs with every symlink resolved, failing when a link leads
// outside the workspace.
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
		target, known := r.links[next]
		if !known {
			e, err := r.cli.Stat(ctx, next)
			if client.IsNotFound(err) {
				// Nothing below a missing component exists to be a link.
				return path.Join(append([]string{next}, rest...)...), nil
			}
			if connect.CodeOf(err) == connect.CodePermissionDenied {
				// A daemon that confines paths itself (envd --confine)
				// refuses a link that leads outside before we see it.
				return "", inputErr(field, "path %q resolves (through a symlink) outside the workspace; refused", orig)
			}
			if err != nil {
				return "", err
			}
			if e.Type == client.TypeSymlink {
				target = e.SymlinkTarget
				if target == "" {
					target = "."
				}
			}
			r.links[next] = target
		}
		if target == "" {
			cur = next
			continue
		}
		hops++
		if hops > maxLinkHops {
			return "", inputErr(field, "path %q has too many levels of symbolic links", orig)
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
func (r *pathResolver) rel(abs string) string {
	if abs == r.root {
		return "."
	}
	if r.root == "/" {
		return strings.TrimPrefix(abs, "/")
	}
	if s, ok := strings.CutPrefix(abs, r.root+"/"); ok {
		return s
	}
	return abs
}

package tools

import (
	"path"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/envd/search"
)

// toolDataDir is the workspace directory where the tools keep their own
// files (run logs). list_files and collect_outputs do not descend into it
// unless asked for it by name, so `**` does not drown results in logs.
const toolDataDir = ".sandbox-mcp"

// maxGlobSegments bounds a pattern's length in path segments.
const maxGlobSegments = 64

// globPattern is a compiled workspace glob, matched against
// workspace-relative slash paths. Segments are separated by "/"; a "**"
// segment matches any number of segments (none included, except at the end:
// "out/**" matches what is inside out, not out); any other segment
// follows path.Match within one segment: `*`, `?`, `[...]` and `\` escapes.
// A globPattern is immutable and safe for concurrent use.
type globPattern struct {
	raw  string
	segs []string
}

// compileGlob checks and compiles pattern; field names the argument in
// errors. Leading "./" is ignored; absolute patterns, ".." segments, NUL bytes
// and malformed brackets are refused.
func compileGlob(field, pattern string) (*globPattern, error) {
	if pattern == "" {
		return nil, inputErr(field, "the glob is empty; give a workspace-relative pattern such as **/*.txt")
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		return nil, inputErr(field, "glob %q contains a NUL byte", pattern)
	}
	if strings.HasPrefix(pattern, "/") {
		return nil, inputErr(field, "glob %q is absolute; globs are relative to the workspace root (for example out/**/*.csv)", pattern)
	}
	var segs []string
	for _, s := range strings.Split(pattern, "/") {
		switch s {
		case "", ".":
			continue
		case "..":
			return nil, inputErr(field, "glob %q contains .., which would leave the workspace", pattern)
		case "**":
			if len(segs) > 0 && segs[len(segs)-1] == "**" {
				continue // "**/**" means the same as "**"
			}
		default:
			if _, err := path.Match(s, ""); err != nil {
				return nil, inputErr(field, "glob %q has a malformed segment %q (check [ ] brackets and \\ escapes)", pattern, s)
			}
		}
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		return nil, inputErr(field, "glob %q matches only the workspace root; give a pattern for files, such as **", pattern)
	}
	if len(segs) > maxGlobSegments {
		return nil, inputErr(field, "glob %q has more than %d segments", pattern, maxGlobSegments)
	}
	return &globPattern{raw: pattern, segs: segs}, nil
}

// hasMeta reports whether s, a glob segment, contains a wildcard.
func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// base returns the literal directory the pattern starts with ("" for the
// workspace root) and the number of segments below it that a match may have
// (-1: any, because of "**"). A pattern without wildcards has base equal to
// its parent directory and depth 1.
func (g *globPattern) base() (dir string, depth int) {
	i := 0
	for i < len(g.segs)-1 && !hasMeta(g.segs[i]) {
		i++
	}
	rest := g.segs[i:]
	depth = len(rest)
	for _, s := range rest {
		if s == "**" {
			depth = -1
			break
		}
	}
	return strings.Join(g.segs[:i], "/"), depth
}

// literal returns the path the pattern names when it has no wildcard.
func (g *globPattern) literal() (string, bool) {
	for _, s := range g.segs {
		if hasMeta(s) {
			return "", false
		}
	}
	return strings.Join(g.segs, "/"), true
}

// namesToolData reports whether the pattern names toolDataDir literally as
// its first segment (so matches inside it are wanted).
func (g *globPattern) namesToolData() bool { return g.segs[0] == toolDataDir }

// match reports whether rel, a clean workspace-relative slash path, matches;
// a trailing "**" needs one segment at least (out/** is what is inside out).
// It runs in O(segments × path segments) whatever the pattern.
func (g *globPattern) match(rel string) bool {
	if rel == "" || rel == "." {
		return false
	}
	return search.MatchSegments(g.segs, strings.Split(rel, "/"), search.WithTrailingGlobstarNonEmpty())
}

// underToolData reports whether rel lies inside toolDataDir.
func underToolData(rel string) bool { return strings.HasPrefix(rel, toolDataDir+"/") }

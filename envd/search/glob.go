package search

import (
	"path"
	"strings"
)

// glob is one include or exclude pattern. Without "/" it matches a path's
// base name; with one, the whole Root-relative path, segment by segment,
// where "**" matches any number of segments (none included). Other segments
// follow path.Match. A malformed segment matches nothing.
type glob struct {
	base bool
	segs []string
}

func compileGlob(p string) glob {
	p = strings.TrimPrefix(p, "./")
	if !strings.Contains(strings.TrimSuffix(p, "/"), "/") {
		return glob{base: true, segs: []string{strings.TrimSuffix(p, "/")}}
	}
	var segs []string
	for _, s := range strings.Split(p, "/") {
		if s == "" || s == "." {
			continue
		}
		if s == "**" && len(segs) > 0 && segs[len(segs)-1] == "**" {
			continue
		}
		segs = append(segs, s)
	}
	return glob{segs: segs}
}

// match reports whether rel (a clean slash path) matches.
func (g glob) match(rel string) bool {
	if g.base {
		m, _ := path.Match(g.segs[0], path.Base(rel))
		return m
	}
	return MatchSegments(g.segs, strings.Split(rel, "/"))
}

// MatchOption changes how MatchSegments treats a pattern.
type MatchOption func(*matchConfig)

type matchConfig struct {
	trailingNonEmpty bool
}

// WithTrailingGlobstarNonEmpty makes a final "**" segment match one part at
// least, so "out/**" matches what is inside out but not out itself (as in
// .gitignore). By default a final "**" may match no part, like any other.
func WithTrailingGlobstarNonEmpty() MatchOption {
	return func(c *matchConfig) { c.trailingNonEmpty = true }
}

// MatchSegments reports whether parts, a slash path split at "/", match
// segs, a glob split the same way: a "**" segment matches any number of
// parts (none included); any other follows path.Match within one part, and
// a malformed one matches nothing. It is shared by the search walker and the
// tools' workspace globs so both read a pattern alike, and runs in
// O(len(segs) × len(parts)) whatever the pattern.
func MatchSegments(segs, parts []string, opts ...MatchOption) bool {
	var cfg matchConfig
	for _, o := range opts {
		o(&cfg)
	}
	// ok[j]: the segments consumed so far can match parts[:j].
	ok := make([]bool, len(parts)+1)
	next := make([]bool, len(parts)+1)
	ok[0] = true
	for i, seg := range segs {
		clear(next)
		if seg == "**" {
			// Zero or more parts: every j reachable from an earlier ok (or,
			// for a final "**" that must match something, a strictly
			// earlier one).
			nonEmpty := cfg.trailingNonEmpty && i == len(segs)-1
			seen := false
			for j := range ok {
				if !nonEmpty {
					seen = seen || ok[j]
				}
				next[j] = seen
				if nonEmpty {
					seen = seen || ok[j]
				}
			}
		} else {
			for j := 0; j < len(parts); j++ {
				if ok[j] {
					if m, _ := path.Match(seg, parts[j]); m {
						next[j+1] = true
					}
				}
			}
		}
		ok, next = next, ok
	}
	return ok[len(parts)]
}

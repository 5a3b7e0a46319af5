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
	parts := strings.Split(rel, "/")
	// ok[j]: the segments so far can match parts[:j].
	ok := make([]bool, len(parts)+1)
	next := make([]bool, len(parts)+1)
	ok[0] = true
	for _, seg := range g.segs {
		clear(next)
		if seg == "**" {
			seen := false
			for j := range ok {
				seen = seen || ok[j]
				next[j] = seen
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

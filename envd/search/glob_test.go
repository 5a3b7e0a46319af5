package search

import (
	"strings"
	"testing"
)

// TestMatchSegments checks the segment matcher both ways a final "**" is
// read: by default it may match no part (the search walker's includes and
// excludes), with WithTrailingGlobstarNonEmpty it must match one at least
// (the tools' workspace globs).
func TestMatchSegments(t *testing.T) {
	cases := []struct {
		pattern                string
		yes, no, onlyByDefault []string
	}{
		{"out/**", []string{"out/a", "out/a/b"}, []string{"outer/a", "x/out/a"}, []string{"out"}},
		{"**", []string{"a", "a/b/c"}, nil, nil},
		{"src/**/*.go", []string{"src/a.go", "src/x/y/a.go"}, []string{"a.go", "srcx/a.go"}, nil},
		{"a/**/b/**/c", []string{"a/b/c", "a/x/b/y/z/c"}, []string{"a/b", "a/c/b"}, nil},
		{"[ab]*/x", []string{"a1/x", "b/x"}, []string{"c/x"}, nil},
		{"a[/x", nil, []string{"a[/x", "a/x"}, nil},
	}
	for _, tc := range cases {
		segs := strings.Split(tc.pattern, "/")
		for _, opts := range [][]MatchOption{nil, {WithTrailingGlobstarNonEmpty()}} {
			strict := len(opts) > 0
			check := func(rel string, want bool) {
				if got := MatchSegments(segs, strings.Split(rel, "/"), opts...); got != want {
					t.Errorf("MatchSegments(%q, %q) strict=%v = %v; want %v", tc.pattern, rel, strict, got, want)
				}
			}
			for _, rel := range tc.yes {
				check(rel, true)
			}
			for _, rel := range tc.no {
				check(rel, false)
			}
			for _, rel := range tc.onlyByDefault {
				check(rel, !strict)
			}
		}
	}
}

// TestGlobTrailingDoubleStar pins that the walker's "dir/**" also matches
// dir itself, so an exclude of it prunes the directory.
func TestGlobTrailingDoubleStar(t *testing.T) {
	g := compileGlob("out/**")
	for rel, want := range map[string]bool{"out": true, "out/a/b": true, "outer": false, "b.txt": false} {
		if got := g.match(rel); got != want {
			t.Errorf("match(%q) = %v; want %v", rel, got, want)
		}
	}
	if !compileGlob("*.txt").match("sub/b.txt") {
		t.Error("a base-name glob does not match in a subdirectory")
	}
}

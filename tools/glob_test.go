//go:build linux

package tools

import (
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		pattern string
		yes, no []string
	}{
		{"*.txt", []string{"a.txt", ".hidden.txt"}, []string{"dir/a.txt", "a.txt.bak"}},
		{"**", []string{"a", "a/b/c"}, nil},
		{"**/*.go", []string{"main.go", "a/b/c.go"}, []string{"a/b/c.gox", "go"}},
		{"src/**/*.go", []string{"src/a.go", "src/x/y/a.go"}, []string{"a.go", "srcx/a.go"}},
		{"out/**", []string{"out/a", "out/a/b"}, []string{"out", "outer/a"}},
		{"a/**/b/**/c", []string{"a/b/c", "a/x/b/y/z/c"}, []string{"a/b", "a/c/b"}},
		{"./a/?.txt", []string{"a/1.txt"}, []string{"a/12.txt"}},
		{"[ab]*/x", []string{"a1/x", "b/x"}, []string{"c/x"}},
		{`a\*b`, []string{"a*b"}, []string{"axb"}},
		{"**/**/x", []string{"x", "a/x"}, []string{"y"}},
		{"a//b", []string{"a/b"}, nil},
	}
	for _, tc := range cases {
		g, err := compileGlob("glob", tc.pattern)
		if err != nil {
			t.Fatalf("%q: %v", tc.pattern, err)
		}
		for _, p := range tc.yes {
			if !g.match(p) {
				t.Errorf("%q should match %q", tc.pattern, p)
			}
		}
		for _, p := range tc.no {
			if g.match(p) {
				t.Errorf("%q should not match %q", tc.pattern, p)
			}
		}
	}
}

func TestGlobRefused(t *testing.T) {
	for _, p := range []string{"", "/etc/*", "../x", "a/../../b", "a[", "x\x00", ".", "./", strings.Repeat("a/", 70)} {
		if _, err := compileGlob("globs[0]", p); err == nil {
			t.Errorf("%q accepted", p)
		} else if !strings.Contains(err.Error(), "globs[0]") {
			t.Errorf("%q: error does not name the field: %v", p, err)
		}
	}
}

func TestGlobBase(t *testing.T) {
	for _, tc := range []struct {
		pattern, dir string
		depth        int
	}{
		{"**/*.go", "", -1},
		{"out/**", "out", -1},
		{"out/sub/*.csv", "out/sub", 1},
		{"out/*/x/*.csv", "out", 3},
		{"a/b/c.txt", "a/b", 1},
		{"*", "", 1},
	} {
		g, err := compileGlob("g", tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if dir, depth := g.base(); dir != tc.dir || depth != tc.depth {
			t.Errorf("base(%q) = %q, %d; want %q, %d", tc.pattern, dir, depth, tc.dir, tc.depth)
		}
	}
}

// Many ** segments stay cheap (the matcher is quadratic, not exponential).
func TestGlobManyDoubleStars(t *testing.T) {
	g, err := compileGlob("g", strings.Repeat("**/a/", 30)+"b")
	if err != nil {
		t.Fatal(err)
	}
	if g.match(strings.Repeat("a/", 60) + "c") {
		t.Error("matched")
	}
}

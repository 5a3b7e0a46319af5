package paths

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
)

func newTree(t testing.TB) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{root, outside, filepath.Join(root, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600))
	must(os.Symlink(outside, filepath.Join(root, "escape")))
	must(os.Symlink("sub", filepath.Join(root, "inner")))
	must(os.Symlink("../../outside/new", filepath.Join(root, "sub", "dangling-out")))
	must(os.Symlink("missing", filepath.Join(root, "dangling-in")))
	must(os.Symlink("loop2", filepath.Join(root, "loop1")))
	must(os.Symlink("loop1", filepath.Join(root, "loop2")))
	return root, outside
}

func TestResolve(t *testing.T) {
	root, outside := newTree(t)
	home := filepath.Join(root, "sub")
	u := identity.User{Name: "u", Home: home}
	confined, err := New(root, true)
	if err != nil {
		t.Fatal(err)
	}
	open, err := New(root, false)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in       string
		want     string // expected result (both modes) when no error
		confined error  // expected error kind under confinement
		open     error  // expected error kind without confinement
	}{
		{in: "", want: root},
		{in: ".", want: root},
		{in: "a/b", want: filepath.Join(root, "a/b")},
		{in: "sub/../a", want: filepath.Join(root, "a")},
		{in: "~", want: home},
		{in: "~/x", want: filepath.Join(home, "x")},
		{in: "~root/x", confined: ErrInvalid, open: ErrInvalid},
		{in: "a\x00b", confined: ErrInvalid, open: ErrInvalid},
		{in: "../outside/secret", want: filepath.Join(outside, "secret"), confined: ErrOutside},
		{in: "sub/../../outside", want: outside, confined: ErrOutside},
		{in: filepath.Join(outside, "secret"), want: filepath.Join(outside, "secret"), confined: ErrOutside},
		{in: "/etc/passwd", want: "/etc/passwd", confined: ErrOutside},
		{in: root + "/sub", want: root + "/sub"},
		{in: "escape/secret", want: filepath.Join(root, "escape/secret"), confined: ErrOutside},
		{in: "escape", want: filepath.Join(root, "escape"), confined: ErrOutside},
		{in: "inner/file", want: filepath.Join(root, "inner/file")},
		{in: "sub/dangling-out", want: filepath.Join(root, "sub/dangling-out"), confined: ErrOutside},
		{in: "dangling-in", want: filepath.Join(root, "dangling-in")},
		{in: "loop1", want: filepath.Join(root, "loop1"), confined: ErrInvalid},
		{in: "new/dir/file", want: filepath.Join(root, "new/dir/file")},
	}
	for _, tc := range cases {
		for _, mode := range []struct {
			r    *Resolver
			want error
		}{{confined, tc.confined}, {open, tc.open}} {
			got, err := mode.r.Resolve(tc.in, u)
			if mode.want != nil {
				if !errors.Is(err, mode.want) {
					t.Errorf("confine=%v Resolve(%q) = %q, %v; want error %v", mode.r.Confined(), tc.in, got, err, mode.want)
				} else if !strings.Contains(err.Error(), tc.in) && !strings.Contains(err.Error(), "NUL") {
					t.Errorf("error %q does not quote the path %q", err, tc.in)
				}
				continue
			}
			if err != nil || got != tc.want {
				t.Errorf("confine=%v Resolve(%q) = %q, %v; want %q", mode.r.Confined(), tc.in, got, err, tc.want)
			}
		}
	}
}

func TestNewRejectsBadRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{file, filepath.Join(dir, "missing")} {
		if _, err := New(root, true); err == nil {
			t.Errorf("New(%q) succeeded", root)
		}
	}
}

// FuzzResolve checks the confinement invariant: whatever the input, a path
// the confined resolver accepts lies inside the root once symlinks are
// resolved, as filepath.EvalSymlinks resolves them.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"", "a", "../x", "/etc", "~", "~/a/../..", "escape/secret", "inner/../..", "a\x00", "sub/dangling-out", "////", "./.././"} {
		f.Add(s)
	}
	root, _ := newTree(f)
	r, err := New(root, true)
	if err != nil {
		f.Fatal(err)
	}
	u := identity.User{Home: filepath.Join(root, "sub")}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := r.Resolve(p, u)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Resolve(%q) error %v is not a *Error", p, err)
			}
			return
		}
		if !filepath.IsAbs(got) || filepath.Clean(got) != got {
			t.Fatalf("Resolve(%q) = %q, not clean and absolute", p, got)
		}
		// Checked independently of resolveLinks and within: the kernel's
		// view through filepath.EvalSymlinks.
		real, err := evalLongest(got, 0)
		if err != nil {
			t.Fatalf("accepted %q (%q) but cannot resolve it: %v", p, got, err)
		}
		if rel, err := filepath.Rel(realRoot, real); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("Resolve(%q) = %q resolves to %q outside %q", p, got, real, realRoot)
		}
	})
}

// evalLongest resolves every symlink of p, which need not exist, with
// filepath.EvalSymlinks: the longest prefix that exists is resolved, and the
// rest, which holds no links, is appended. A dangling link at the end of that
// prefix is followed to its target.
func evalLongest(p string, links int) (string, error) {
	prefix, rest := p, ""
	for prefix != "/" {
		if _, err := os.Lstat(prefix); err == nil {
			break
		}
		rest = filepath.Join(filepath.Base(prefix), rest)
		prefix = filepath.Dir(prefix)
	}
	real, err := filepath.EvalSymlinks(prefix)
	if err == nil {
		return filepath.Join(real, rest), nil
	}
	// prefix exists and its parents resolve, so it is a link that does not.
	target, rerr := os.Readlink(prefix)
	if rerr != nil || links >= 40 {
		return "", err
	}
	if !filepath.IsAbs(target) {
		dir, err := filepath.EvalSymlinks(filepath.Dir(prefix))
		if err != nil {
			return "", err
		}
		target = filepath.Join(dir, target)
	}
	return evalLongest(filepath.Join(target, rest), links+1)
}

// The independent check of FuzzResolve agrees with the tree's known links.
func TestEvalLongest(t *testing.T) {
	root, outside := newTree(t)
	root, _ = filepath.EvalSymlinks(root)
	outside, _ = filepath.EvalSymlinks(outside)
	for in, want := range map[string]string{
		"":                     root,
		"sub/x/y":              filepath.Join(root, "sub/x/y"),
		"inner/file":           filepath.Join(root, "sub/file"),
		"escape/secret":        filepath.Join(outside, "secret"),
		"escape/new/deeper":    filepath.Join(outside, "new/deeper"),
		"sub/dangling-out":     filepath.Join(outside, "new"),
		"sub/dangling-out/a/b": filepath.Join(outside, "new/a/b"),
		"dangling-in":          filepath.Join(root, "missing"),
	} {
		got, err := evalLongest(filepath.Join(root, in), 0)
		if err != nil || got != want {
			t.Errorf("evalLongest(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if got, err := evalLongest(filepath.Join(root, "loop1"), 0); err == nil {
		t.Errorf("evalLongest(loop1) = %q, want an error", got)
	}
}

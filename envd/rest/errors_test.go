//go:build linux

package rest

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"syscall"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
)

// Filesystem errors map to statuses through fsrpc.CodeOf and one table;
// each endpoint keeps its own wording.
func TestErrorStatuses(t *testing.T) {
	pathErr := func(errno syscall.Errno) error { return &fs.PathError{Op: "open", Path: "/w/f", Err: errno} }
	for _, tc := range []struct {
		name   string
		err    error
		status int
		msg    string
	}{
		{"open ENOENT", openError(pathErr(syscall.ENOENT), "/w/f"), http.StatusNotFound, "path '/w/f' does not exist"},
		{"open EACCES", openError(pathErr(syscall.EACCES), "/w/f"), http.StatusForbidden, "path '/w/f' is not readable: permission denied"},
		{"open ENOTDIR", openError(pathErr(syscall.ENOTDIR), "/w/f"), http.StatusBadRequest, "open '/w/f': not a directory"},
		{"open EIO", openError(pathErr(syscall.EIO), "/w/f"), http.StatusInternalServerError, "open '/w/f': input/output error"},
		{"write ENOSPC", writeError(pathErr(syscall.ENOSPC), "/w/f"), http.StatusInsufficientStorage, "not enough disk space to write '/w/f': no space left on device"},
		{"write EDQUOT", writeError(pathErr(syscall.EDQUOT), "/w/f"), http.StatusInsufficientStorage, "not enough disk space to write '/w/f': disk quota exceeded"},
		{"write EACCES", writeError(pathErr(syscall.EACCES), "/w/f"), http.StatusForbidden, "cannot write '/w/f': permission denied"},
		{"write EROFS", writeError(pathErr(syscall.EROFS), "/w/f"), http.StatusForbidden, "cannot write '/w/f': read-only file system"},
		{"write EISDIR", writeError(pathErr(syscall.EISDIR), "/w/f"), http.StatusBadRequest, "cannot write '/w/f': is a directory"},
		{"write ELOOP", writeError(&os.LinkError{Op: "rename", Old: "a", New: "b", Err: syscall.ELOOP}, "/w/f"), http.StatusBadRequest, "cannot write '/w/f': too many levels of symbolic links"},
		{"write EIO", writeError(pathErr(syscall.EIO), "/w/f"), http.StatusInternalServerError, "cannot write '/w/f': input/output error"},
		{"write httpError", writeError(errorf(http.StatusTeapot, "kept"), "/w/f"), http.StatusTeapot, "kept"},
	} {
		var he *httpError
		if !errors.As(tc.err, &he) || he.status != tc.status || he.msg != tc.msg {
			t.Errorf("%s = %v; want %d %q", tc.name, tc.err, tc.status, tc.msg)
		}
	}
}

func TestResolveStatuses(t *testing.T) {
	r, err := paths.New(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{paths: r}
	u := identity.User{}
	for p, status := range map[string]int{"/etc/passwd": http.StatusForbidden, "~root/x": http.StatusBadRequest, "a\x00b": http.StatusBadRequest} {
		_, err := s.resolve(p, u)
		var he *httpError
		if !errors.As(err, &he) || he.status != status {
			t.Errorf("resolve(%q) = %v, want status %d", p, err, status)
			continue
		}
		_, perr := r.Resolve(p, u)
		if he.msg != perr.Error() {
			t.Errorf("resolve(%q) message %q, want the resolver's %q", p, he.msg, perr)
		}
	}
}

//go:build linux

package fsrpc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
)

// CodeOf picks the Connect code for a filesystem error. Errors that are the
// client's to fix get specific codes; anything unexpected is internal. The
// REST endpoints map the same codes to HTTP statuses.
func CodeOf(err error) connect.Code {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return connect.CodeNotFound
		case errors.Is(err, fs.ErrExist):
			return connect.CodeAlreadyExists
		case errors.Is(err, fs.ErrPermission):
			return connect.CodePermissionDenied
		}
		return connect.CodeInternal
	}
	switch errno {
	case syscall.ENOENT:
		return connect.CodeNotFound
	case syscall.EEXIST, syscall.ENOTEMPTY:
		return connect.CodeAlreadyExists
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return connect.CodePermissionDenied
	case syscall.ENOTDIR, syscall.EISDIR, syscall.EINVAL, syscall.ENAMETOOLONG:
		return connect.CodeInvalidArgument
	case syscall.ENOSPC, syscall.EDQUOT:
		return connect.CodeResourceExhausted
	case syscall.ELOOP, syscall.EXDEV, syscall.EBUSY:
		return connect.CodeFailedPrecondition
	}
	return connect.CodeInternal
}

// RootCause drops the *fs.PathError or *os.LinkError wrapping of err, whose
// text repeats the path that a message already names.
func RootCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// PathError maps an error of paths.Resolver.Resolve for the client path p
// to a Connect error: permission_denied for a path outside the root,
// invalid_argument for a malformed one, internal for anything else.
func PathError(err error, p string) *connect.Error {
	switch {
	case errors.Is(err, paths.ErrOutside):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, paths.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf("resolve path %q: %w", p, err))
}

// fsError wraps err in a Connect error whose message leads with what, a
// description naming the path (e.g. "move /w/a to /w/b"). For *fs.PathError
// and *os.LinkError only the underlying reason is kept, since what already
// names the path.
func fsError(err error, what string) *connect.Error {
	return connect.NewError(CodeOf(err), fmt.Errorf("%s: %w", what, RootCause(err)))
}

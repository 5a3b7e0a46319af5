package fsrpc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"connectrpc.com/connect"
)

// codeOf picks the Connect code for a filesystem error. Errors that are the
// client's to fix get specific codes; anything unexpected is internal.
func codeOf(err error) connect.Code {
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

// fsError wraps err in a Connect error whose message leads with what, a
// description naming the path (e.g. "move /w/a to /w/b"). For *fs.PathError
// and *os.LinkError only the underlying reason is kept, since what already
// names the path.
func fsError(err error, what string) *connect.Error {
	reason := err
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		reason = pe.Err
	case errors.As(err, &le):
		reason = le.Err
	}
	return connect.NewError(codeOf(err), fmt.Errorf("%s: %w", what, reason))
}

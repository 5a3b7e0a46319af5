//go:build linux

package fsrpc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

// Stat describes one path without following a final symlink. A missing path
// is not_found "file not found: <path>".
func (s *Service) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	p, err := s.resolve(req.Msg.GetPath(), s.users.FromContext(ctx))
	if err != nil {
		return nil, err
	}
	entry, err := entryInfo(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("file not found: %s", p))
		}
		return nil, fsError(err, "stat "+p)
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: entry}), nil
}

// MakeDir creates a directory and its missing parents, owned by the request's
// user. An existing directory is already_exists; an existing non-directory is
// invalid_argument.
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	u := s.users.FromContext(ctx)
	p, err := s.resolve(req.Msg.GetPath(), u)
	if err != nil {
		return nil, err
	}
	if err := existsCheck(p); err != nil {
		return nil, err
	}
	if err := MkdirAll(filepath.Dir(p), u); err != nil {
		return nil, fsError(err, "create parents of "+p)
	}
	if err := os.Mkdir(p, dirMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Lost a race with another creator; report what is there now.
			if err := existsCheck(p); err != nil {
				return nil, err
			}
		}
		return nil, fsError(err, "make directory "+p)
	}
	if err := chown(p, u); err != nil {
		return nil, fsError(err, "set owner of "+p)
	}
	entry, err := entryInfo(p)
	if err != nil {
		return nil, fsError(err, "stat "+p)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: entry}), nil
}

// existsCheck returns the MakeDir error for something already at p, or nil
// when p does not exist. A symlink to a directory counts as a directory.
func existsCheck(p string) error {
	info, err := os.Stat(p)
	switch {
	case err == nil && info.IsDir():
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
	case err == nil:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists and is not a directory: %s", p))
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return fsError(err, "stat "+p)
	}
}

// Move renames source to destination with rename(2), creating the
// destination's missing parents. A missing source is not_found; moving
// across filesystems is failed_precondition (rename cannot do it).
func (s *Service) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	u := s.users.FromContext(ctx)
	src, err := s.resolve(req.Msg.GetSource(), u)
	if err != nil {
		return nil, err
	}
	dst, err := s.resolve(req.Msg.GetDestination(), u)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(src); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("source not found: %s", src))
		}
		return nil, fsError(err, "stat "+src)
	}
	if err := MkdirAll(filepath.Dir(dst), u); err != nil {
		return nil, fsError(err, "create parents of "+dst)
	}
	if err := os.Rename(src, dst); err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return nil, connect.NewError(connect.CodeFailedPrecondition,
				fmt.Errorf("move %s to %s: source and destination are on different filesystems", src, dst))
		}
		return nil, fsError(err, fmt.Sprintf("move %s to %s", src, dst))
	}
	entry, err := entryInfo(dst)
	if err != nil {
		return nil, fsError(err, "stat "+dst)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: entry}), nil
}

// ListDir lists a directory to a depth: 0 and 1 list its entries, N also
// lists the entries of subdirectories N-1 levels down, in lexical pre-order
// with absolute paths under the requested path. A symlink given as the path
// is followed (a loop is failed_precondition); symlinks met inside are
// listed, not followed. Subdirectories that cannot be read are listed
// without their contents. A request with ListPageHeader gets one page of
// that listing (see ListPageHeader).
func (s *Service) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	p, err := s.resolve(req.Msg.GetPath(), s.users.FromContext(ctx))
	if err != nil {
		return nil, err
	}
	depth := int(max(req.Msg.GetDepth(), 1))

	info, err := os.Stat(p)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("cannot list %s: symbolic link loop", p))
	case errors.Is(err, fs.ErrNotExist):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("directory not found: %s", p))
	case err != nil:
		return nil, fsError(err, "stat "+p)
	case !info.IsDir():
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", p))
	}

	limit, after, paged, err := parseListPage(req)
	if err != nil {
		return nil, err
	}
	if paged {
		pager := &listPager{ctx: ctx, limit: limit}
		if err := pager.walk(p, nil, depth, after); err != nil {
			var ce *connect.Error
			if errors.As(err, &ce) {
				return nil, ce
			}
			return nil, fsError(err, "list "+p)
		}
		resp := connect.NewResponse(&filesystem.ListDirResponse{Entries: pager.out})
		resp.Header().Set(ListPagedHeader, "1")
		if pager.full {
			resp.Header().Set(ListNextHeader, encodeCursor(pager.next))
		}
		return resp, nil
	}
	var entries []*filesystem.EntryInfo
	if err := listTree(ctx, p, depth, &entries, true); err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return nil, ce
		}
		return nil, fsError(err, "list "+p)
	}
	return connect.NewResponse(&filesystem.ListDirResponse{Entries: entries}), nil
}

// listTree appends the entries of dir, and of its subdirectories while depth
// allows, to out. Only errors reading the top directory are returned.
func listTree(ctx context.Context, dir string, depth int, out *[]*filesystem.EntryInfo, top bool) error {
	if err := ctx.Err(); err != nil {
		return connect.NewError(connect.CodeCanceled, fmt.Errorf("list %s: %w", dir, err))
	}
	dirents, err := os.ReadDir(dir)
	if err != nil {
		if top {
			return err
		}
		return nil
	}
	for _, d := range dirents {
		full := filepath.Join(dir, d.Name())
		info, err := d.Info()
		if err != nil {
			continue // removed while listing
		}
		*out = append(*out, entryFromInfo(full, info))
		if depth > 1 && info.IsDir() {
			if err := listTree(ctx, full, depth-1, out, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// Remove deletes a path and everything under it, as os.RemoveAll does: a
// missing path succeeds. A symlink is removed, not its target. Failures are
// internal.
func (s *Service) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	p, err := s.resolve(req.Msg.GetPath(), s.users.FromContext(ctx))
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("remove %s: %w", p, err))
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// dirMode is the mode of directories the service creates (before umask).
const dirMode = 0o755

// MkdirAll creates dir and its missing parents like os.MkdirAll, and when
// u.Switch is set hands every directory it created (not the existing ones)
// to u. An existing dir is not an error.
func MkdirAll(dir string, u identity.User) error {
	info, err := os.Stat(dir)
	if err == nil {
		if !info.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := MkdirAll(parent, u); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, dirMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			if info, serr := os.Stat(dir); serr == nil && info.IsDir() {
				return nil // created concurrently
			}
		}
		return err
	}
	return chown(dir, u)
}

// chown hands path to u when u.Switch is set; otherwise it is a no-op.
func chown(path string, u identity.User) error {
	if !u.Switch {
		return nil
	}
	return os.Lchown(path, int(u.UID), int(u.GID))
}

//go:build linux

package local

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A sandbox's envd socket is <sandbox dir>/ctl/envd.sock. The server makes
// the directory (0700, its own), binds and listens on the socket itself, and
// hands envd the listening socket as an inherited descriptor (envd --listen
// fd:N). No sandbox can see ctl/ (it is not bound into bwrap's mount
// namespace), let alone write it.
//
// Why: the socket used to be run/envd.sock, in the directory bound writable
// at /.sandbox-mcp/run. A sandbox could replace it with a symlink to another
// sandbox's socket, or to any unix socket of the host, and the server (root,
// perhaps) would connect there on its next dial and send that sandbox's
// calls, its model's commands, to the other sandbox. The server must never
// follow anything a sandbox can write when it reaches its daemon; before
// every dial checkSocketPath makes sure none of the path is.
//
// run/ is still bound at /.sandbox-mcp/run, empty, for what runs inside.
const (
	controlDir = "ctl"
	socketName = "envd.sock"
)

// Descriptors envd gets its listening socket on: after the ready pipe and,
// under bwrap, bwrap's info and block pipes (exec.Cmd.ExtraFiles from 3).
const (
	bwrapListenFD = 6
	plainListenFD = 4
)

// socketPath is the envd socket of the sandbox in dir.
func socketPath(dir string) string { return filepath.Join(dir, controlDir, socketName) }

// listenControlSocket makes the sandbox's control directory (or checks the
// one there), replaces a socket a previous daemon left, and binds and listens
// on the socket. It returns the listening socket as a file to pass to envd;
// the caller closes it once the daemon has its copy. The caller holds the
// sandbox's owner lock, so no daemon uses the socket meanwhile.
func listenControlSocket(dir string) (*os.File, error) {
	ln, err := listenInServerDir(filepath.Join(dir, controlDir), 0o700, socketName)
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, controlDir, socketName)
	// The socket outlives this listener: envd serves on it.
	ln.SetUnlinkOnClose(false)
	defer func() { _ = ln.Close() }()
	if err := os.Chmod(sock, 0o600); err != nil {
		return nil, err
	}
	return ln.File()
}

// listenInServerDir makes directory dir with mode perm (or checks the one
// there: a directory, not a symlink, of the server's user, given perm),
// replaces a socket name in it that a previous daemon left, and listens on
// a new one.
func listenInServerDir(dir string, perm fs.FileMode, name string) (*net.UnixListener, error) {
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if err := ownedBy(dir, fi, os.Geteuid()); err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	if err := os.Chmod(dir, perm); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, name)
	if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
}

// checkSocketPath refuses to let a client connect to path unless only the
// server's user can have put what is there: path must be the envd socket of
// a sandbox of this state directory, the state directory (as configured)
// and every directory below it down to the socket must belong to the
// server's user and be writable by nobody else, none of them below the
// state directory may be a symlink, and the socket must be a socket of the
// server's user, not a symlink. Lstat only: nothing is followed.
func (p *Provider) checkSocketPath(path string) error {
	rel, err := filepath.Rel(p.sandboxesDir, path)
	parts := strings.Split(rel, string(filepath.Separator))
	if err != nil || len(parts) != 3 || !validID(parts[0]) || parts[1] != controlDir || parts[2] != socketName {
		return fmt.Errorf("refusing %s: not a sandbox socket under %s", path, p.sandboxesDir)
	}
	uid := os.Geteuid()
	fi, err := os.Stat(p.stateDir)
	if err != nil {
		return fmt.Errorf("refusing %s: %w", path, err)
	}
	if err := privateDir(p.stateDir, fi, uid); err != nil {
		return fmt.Errorf("refusing %s: %w", path, err)
	}
	dir := p.sandboxesDir
	for _, name := range append([]string{""}, parts[:2]...) {
		dir = filepath.Join(dir, name)
		fi, err := os.Lstat(dir)
		if err != nil {
			return fmt.Errorf("refusing %s: %w", path, err)
		}
		if err := privateDir(dir, fi, uid); err != nil {
			return fmt.Errorf("refusing %s: %w", path, err)
		}
	}
	fi, err = os.Lstat(path)
	switch {
	case err != nil:
		return err // a missing socket: the sandbox is stopped
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("refusing %s: it is a symlink", path)
	case fi.Mode()&fs.ModeSocket == 0:
		return fmt.Errorf("refusing %s: it is not a socket (%s)", path, fi.Mode().Type())
	}
	if err := ownedBy(path, fi, uid); err != nil {
		return fmt.Errorf("refusing %s: %w", path, err)
	}
	return nil
}

// privateDir checks that fi (of path) is a directory, not a symlink, of uid
// that neither its group nor others may write.
func privateDir(path string, fi fs.FileInfo, uid int) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symlink", path)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", path)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by its group or others (mode %v)", path, fi.Mode().Perm())
	}
	return ownedBy(path, fi, uid)
}

// ownedBy checks that fi (of path) belongs to uid.
func ownedBy(path string, fi fs.FileInfo, uid int) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != uid {
		owner := "unknown"
		if ok {
			owner = fmt.Sprint(st.Uid)
		}
		return fmt.Errorf("%s belongs to uid %s, not to the server's uid %d", path, owner, uid)
	}
	return nil
}

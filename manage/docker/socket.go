package docker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The socket files of sandbox ID, under <StateDir>/docker/ID (see the
// package comment): run/envd.sock is where envd binds, in the directory the
// container shares; envd.sock is the server's link to it, beside run, where
// the container cannot reach.
const (
	runDir     = "run"
	socketName = "envd.sock"
	linkTemp   = ".envd.sock.new"
)

// socketPath is the host-only link to sandbox id's envd socket, which
// Endpoint returns; dir is <StateDir>/docker.
func socketPath(dir, id string) string { return filepath.Join(dir, id, socketName) }

// makeRunDir makes (or keeps) the run directory of the sandbox directory
// sandboxDir, writable by every user of the container, since envd binds its
// socket there as whichever user the image runs; the sandbox directory
// (0700) keeps the host's other users out.
func makeRunDir(sandboxDir string) error {
	run := filepath.Join(sandboxDir, runDir)
	if err := os.Mkdir(run, 0o777); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(run)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", run)
	}
	return os.Chmod(run, 0o777)
}

// errNotSocket is why a socket file is refused: it is something else (a
// symbolic link a sandbox put in place of its socket, say).
var errNotSocket = errors.New("not a socket")

// refreshLink makes sandboxDir/envd.sock a hard link of the socket envd
// bound at sandboxDir/run/envd.sock, unless it is one already. The link is
// made without following a symbolic link (linkat without
// AT_SYMLINK_FOLLOW links the symlink itself), and then checked: only a
// socket is kept. The check is on the new link, which the sandbox cannot
// touch, so it cannot swap the file between check and use.
func refreshLink(sandboxDir string) error {
	src := filepath.Join(sandboxDir, runDir, socketName)
	dst := filepath.Join(sandboxDir, socketName)
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("envd socket: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("envd socket %s: refusing a %s: %w", src, fileKind(fi.Mode()), errNotSocket)
	}
	if cur, err := os.Lstat(dst); err == nil && os.SameFile(cur, fi) {
		return nil
	}
	tmp := filepath.Join(sandboxDir, linkTemp)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := linkNoFollow(src, tmp); err != nil {
		return fmt.Errorf("envd socket: link %s: %w", src, err)
	}
	got, err := os.Lstat(tmp)
	if err != nil {
		return fmt.Errorf("envd socket: %w", err)
	}
	if got.Mode().Type() != fs.ModeSocket {
		_ = os.Remove(tmp)
		return fmt.Errorf("envd socket %s: refusing a %s: %w", src, fileKind(got.Mode()), errNotSocket)
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("envd socket: %w", err)
	}
	return nil
}

// fileKind names a file type for messages.
func fileKind(m fs.FileMode) string {
	switch m.Type() {
	case fs.ModeSymlink:
		return "symbolic link"
	case fs.ModeDir:
		return "directory"
	case fs.ModeNamedPipe:
		return "named pipe"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "device"
	case 0:
		return "regular file"
	}
	return "file of mode " + m.String()
}

package tools

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// The artifact store is private to the server's user: its directories are
// 0700 and its files 0600 (0700 for a file that was executable in the
// sandbox), whatever mode the file had there. The names in it reveal
// principals and workspaces, and the files are tenants' outputs: no other
// user of the machine may list or read them. The rest of a file's mode in
// the sandbox is not kept; stage_inputs gives an artifact the usual modes
// back (0644, or 0755 when it was executable).
const (
	artifactDirMode  fs.FileMode = 0o700
	artifactFileMode fs.FileMode = 0o600
	artifactExecMode fs.FileMode = 0o700
)

// storedArtifactMode is the mode of an artifact whose file had mode in the
// sandbox.
func storedArtifactMode(mode fs.FileMode) fs.FileMode {
	if mode.Perm()&0o111 != 0 {
		return artifactExecMode
	}
	return artifactFileMode
}

// stagedArtifactMode is the mode stage_inputs gives the copy of an artifact
// stored with mode.
func stagedArtifactMode(mode fs.FileMode) fs.FileMode {
	if mode.Perm()&0o100 != 0 {
		return 0o755
	}
	return 0o644
}

// widenArtifactModes gives a tree of the artifact store the modes its files
// are staged with.
func widenArtifactModes(t *hostTree) {
	for i := range t.files {
		t.files[i].mode = stagedArtifactMode(t.files[i].mode)
	}
}

// makePrivateDir creates dir (and missing parents) with mode 0700, and
// takes group and other permissions away from it when it already existed
// with them.
func makePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, artifactDirMode); err != nil {
		return err
	}
	return restrictDir(dir)
}

// restrictDir makes the directory dir 0700 when it grants anything to group
// or others. A symlink is left alone.
func restrictDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() || fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	return os.Chmod(dir, artifactDirMode)
}

// restrictArtifactStore fixes the modes of an artifact store made by an
// older version (0755 directories): the store directory and each
// workspace's directory in it become 0700, which closes everything below to
// other users without walking it. A store that does not exist yet is left
// to be made on first use. Problems are logged, never fatal.
func restrictArtifactStore(dir string, log *slog.Logger) {
	if dir == "" {
		return
	}
	if err := restrictDir(dir); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("could not make the artifact store private to this user", "dir", dir, "error", err)
		}
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		log.Warn("could not make the artifact store private to this user", "dir", dir, "error", err)
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if err := restrictDir(filepath.Join(dir, e.Name())); err != nil {
			log.Warn("could not make an artifact store directory private to this user", "dir", filepath.Join(dir, e.Name()), "error", err)
		}
	}
}

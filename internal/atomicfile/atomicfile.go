// Package atomicfile replaces small files whole, for the state files that
// readers in other processes may open at any moment (the HTTP token, the
// local provider's ownership records, the local E2B server's records).
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to a temporary file next to path (.BASE.*.tmp), sets
// its mode to perm and renames it into place, so readers see the old or the
// new content, never a part, and a symlink at path is replaced, not
// followed. On failure the temporary file is removed and path is untouched.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

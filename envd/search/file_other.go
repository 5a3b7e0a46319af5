//go:build !linux

package search

import (
	"errors"
	"os"
	"syscall"
)

// regularFile is an open regular file.
type regularFile struct{ *os.File }

// openRegular opens the regular file name in d without following a
// symlink and returns it with its size; ok is false for anything but a
// regular file.
func openRegular(d *dirRef, name string) (f regularFile, size int64, ok bool, err error) {
	file, err := d.root.OpenFile(name, os.O_RDONLY|openFlags, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return f, 0, false, nil
		}
		return f, 0, false, unwrapPath(err)
	}
	st, err := file.Stat()
	if err != nil || !st.Mode().IsRegular() {
		file.Close()
		return f, 0, false, nil
	}
	return regularFile{file}, st.Size(), true, nil
}

// dirFD is unused outside Linux.
func dirFD(*os.File) int { return -1 }

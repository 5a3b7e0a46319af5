package search

import (
	"os"
	"syscall"
)

// regularFile is an open regular file, read through its descriptor
// directly: no os.File, so no poller registration (O_NONBLOCK would ask
// for one) and no finalizer, four system calls a file in all.
type regularFile struct{ fd int }

// openRegular opens the regular file name (one path component, as the
// directory listing gave it) in d, without following a symlink and without
// blocking on a FIFO swapped in, and returns it with its size. ok is false
// for anything but a regular file, and for a symlink (not followed).
func openRegular(d *dirRef, name string) (f regularFile, size int64, ok bool, err error) {
	var fd int
	for {
		fd, err = syscall.Openat(d.fd, name, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		if err == syscall.ELOOP {
			return f, 0, false, nil
		}
		return f, 0, false, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return f, 0, false, nil
	}
	return regularFile{fd}, st.Size, true, nil
}

func (f regularFile) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(f.fd, p)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, os.NewSyscallError("read", err)
		}
		return n, nil
	}
}

func (f regularFile) Close() error { return syscall.Close(f.fd) }

// dirFD returns the descriptor of the open directory dir.
func dirFD(dir *os.File) int { return int(dir.Fd()) }

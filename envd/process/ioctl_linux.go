package process

import "golang.org/x/sys/unix"

// pendingBytes returns how many bytes wait to be read from a pipe or
// terminal, or 0 when that cannot be told.
func pendingBytes(fd uintptr) int {
	n, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// pipeCapacity returns a pipe's capacity in bytes, or 0 when fd is not a
// pipe.
func pipeCapacity(fd uintptr) int {
	n, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// growPipe asks for a pipe capacity of size bytes and reports whether the
// kernel agreed.
func growPipe(fd uintptr, size int) bool {
	_, err := unix.FcntlInt(fd, unix.F_SETPIPE_SZ, size)
	return err == nil
}

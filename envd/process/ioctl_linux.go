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

//go:build unix

package cmdline

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// checkOpen fails when descriptor fd is not open.
func checkOpen(fd int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return fmt.Errorf("--ready-fd %d is not open: %w", fd, err)
	}
	return nil
}

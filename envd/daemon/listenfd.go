//go:build linux

package daemon

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// listenFD returns a listener on the inherited descriptor named by addr
// ("fd:N", N 3 or more): a socket its parent bound and listens on, so envd
// never creates (or follows) a path of its own. The local provider passes
// the sandbox's socket so, from a directory the sandbox cannot see. The
// listener holds a close-on-exec duplicate; descriptor N itself is closed
// (also when it is refused), so no process envd starts inherits it.
func listenFD(addr, number string) (net.Listener, error) {
	fd, err := strconv.Atoi(number)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("listen %q: want fd:N with N a descriptor number of 3 or more", addr)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("listen %q: descriptor %d is not open: %w", addr, fd, err)
	}
	f := os.NewFile(uintptr(fd), addr)
	defer f.Close()
	if on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || on != 1 {
		if err == nil {
			err = fmt.Errorf("the socket is not listening")
		}
		return nil, fmt.Errorf("listen %q: descriptor %d is not a listening socket: %w", addr, fd, err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listen %q: %w", addr, err)
	}
	return ln, nil
}

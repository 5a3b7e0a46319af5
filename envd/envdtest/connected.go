//go:build linux

package envdtest

import (
	"errors"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// Connected reports whether a connection to ln is waiting to be accepted,
// without waiting for one: a non-blocking accept(2) on the listening socket.
// A connection it finds is accepted and closed. Tests use it to tell that
// nothing dialled a decoy socket.
func Connected(t testing.TB, ln *net.UnixListener) bool {
	t.Helper()
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var acceptErr error
	if err := rc.Control(func(fd uintptr) {
		var nfd int
		if nfd, _, acceptErr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC); acceptErr == nil {
			_ = unix.Close(nfd)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if acceptErr != nil && !errors.Is(acceptErr, unix.EAGAIN) {
		t.Fatalf("accept: %v", acceptErr)
	}
	return acceptErr == nil
}

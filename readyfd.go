package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openReadyFD opens the inherited descriptor fd of --ready-fd, refusing one
// that is not open: a server nobody hears is ready would wait forever.
func openReadyFD(fd int) (*os.File, error) {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("--ready-fd %d is not open: %w", fd, err)
	}
	return os.NewFile(uintptr(fd), "ready-fd"), nil
}

// closeAfterWrite closes its file after the first write.
type closeAfterWrite struct{ f *os.File }

func (c closeAfterWrite) Write(p []byte) (int, error) {
	n, err := c.f.Write(p)
	if cerr := c.f.Close(); err == nil && cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		err = cerr
	}
	return n, err
}

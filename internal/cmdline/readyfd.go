package cmdline

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ReadyFD is the inherited descriptor of --ready-fd, on which serve --http
// and envd tell the parent that started them that they listen: one
// "ready ADDR" line, so the parent waits without polling. The descriptor is
// closed right after that line, so that processes started later (in
// sandboxes, or by the daemon) do not inherit it.
type ReadyFD struct {
	fd int
	f  *os.File
}

// OpenReadyFD opens --ready-fd's descriptor fd; 0 means none and gives nil.
// It refuses a descriptor that is not open: a server nobody hears is ready
// would leave its parent waiting forever.
func OpenReadyFD(fd int) (*ReadyFD, error) {
	if fd <= 0 {
		return nil, nil
	}
	if err := checkOpen(fd); err != nil {
		return nil, err
	}
	return &ReadyFD{fd: fd, f: os.NewFile(uintptr(fd), "ready-fd")}, nil
}

// Write writes p, then closes the descriptor: the ready line is the only
// thing ever written to it.
func (r *ReadyFD) Write(p []byte) (int, error) {
	n, err := r.f.Write(p)
	if cerr := r.f.Close(); err == nil && cerr != nil && !errors.Is(cerr, os.ErrClosed) {
		err = cerr
	}
	return n, err
}

// Announce writes "ready ADDR" (and closes the descriptor); with no
// --ready-fd (r nil) it does nothing.
func (r *ReadyFD) Announce(addr string) error {
	if r == nil {
		return nil
	}
	if _, err := fmt.Fprintf(r, "ready %s\n", addr); err != nil {
		return fmt.Errorf("--ready-fd %d: %w", r.fd, err)
	}
	return nil
}

// Writer returns r as an io.Writer for code that writes the ready line itself (daemon.Run), which writes
// the same "ready ADDR" line; nil (no --ready-fd) when r is nil.
func (r *ReadyFD) Writer() io.Writer {
	if r == nil {
		return nil
	}
	return r
}

// Close closes the descriptor unless the ready line already did; it is
// safe on nil and more than once.
func (r *ReadyFD) Close() error {
	if r == nil {
		return nil
	}
	if err := r.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

//go:build unix

package cmdline

import (
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadyFD: the ready line arrives whole and the descriptor is closed
// right after it (the reader sees EOF); no --ready-fd is a no-op; a
// descriptor that is not open is refused, naming the flag.
func TestReadyFD(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	// The descriptor readyFD owns, as if inherited: a copy of the write end.
	fd, err := unix.Dup(int(pw.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	pw.Close()
	ready, err := OpenReadyFD(fd)
	if err != nil {
		t.Fatal(err)
	}
	if err := ready.Announce("http://127.0.0.1:1/mcp"); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(pr) // ends only once the descriptor is closed
	if err != nil || string(got) != "ready http://127.0.0.1:1/mcp\n" {
		t.Fatalf("read %q, %v", got, err)
	}
	if err := ready.Close(); err != nil {
		t.Errorf("Close after the ready line: %v", err)
	}

	none, err := OpenReadyFD(0)
	if err != nil || none != nil || none.Writer() != nil || none.Announce("x") != nil || none.Close() != nil {
		t.Errorf("no --ready-fd: %v %v", none, err)
	}

	// The largest descriptor number: never open.
	const closed = 1<<31 - 1
	if _, err := OpenReadyFD(closed); err == nil || !strings.Contains(err.Error(), "--ready-fd") {
		t.Errorf("a descriptor that is not open: %v", err)
	}
}

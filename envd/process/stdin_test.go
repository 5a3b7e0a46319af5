//go:build linux

package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestStdinThenEOF(t *testing.T) {
	tab := newTable(t, TableOptions{})
	p, sub := start(t, tab, Spec{Config: Config{Cmd: "cat"}, Stdin: true})
	for _, s := range []string{"hello ", "world\n"} {
		if err := p.WriteStdinContext(context.Background(), []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := p.CloseStdin(); err != nil {
			t.Fatalf("CloseStdin: %v", err)
		}
	}
	out := collect(t, sub)
	if out.stdout.String() != "hello world\n" || out.end.ExitCode != 0 {
		t.Errorf("stdout = %q, end = %+v", out.stdout.String(), out.end)
	}
	err := p.WriteStdinContext(context.Background(), []byte("late"))
	if !errors.Is(err, ErrStdinClosed) || err.Error() != "stdin not enabled or closed for process with pid "+strconv.Itoa(p.Pid()) {
		t.Errorf("write after close: %v", err)
	}
}

func TestNoStdinReadsDevNull(t *testing.T) {
	tab := newTable(t, TableOptions{})
	p, sub := start(t, tab, Spec{Config: Config{Cmd: "cat"}})
	if err := p.WriteStdinContext(context.Background(), []byte("x")); !errors.Is(err, ErrStdinClosed) {
		t.Errorf("WriteStdinContext = %v", err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Errorf("CloseStdin of a never-opened stdin = %v", err)
	}
	if err := p.WritePTY([]byte("x")); !errors.Is(err, ErrNoTTY) {
		t.Errorf("WritePTY = %v", err)
	}
	if err := p.Resize(Size{Cols: 1, Rows: 1}); !errors.Is(err, ErrNoTTY) {
		t.Errorf("Resize = %v", err)
	}
	if out := collect(t, sub); out.stdout.Len() != 0 || out.end.ExitCode != 0 {
		t.Errorf("cat </dev/null: %q %+v", out.stdout.String(), out.end)
	}
}

// drain reads sub in the background until the End; receive takes the result.
func drain(sub *Subscription) <-chan *output {
	outc := make(chan *output, 1)
	go func() {
		defer sub.Close()
		out := &output{}
		for c := range sub.Chunks() {
			out.stdout.Write(c.Bytes())
			c.Release()
		}
		out.end = sub.End()
		outc <- out
	}()
	return outc
}

func receive(t *testing.T, outc <-chan *output) *output {
	t.Helper()
	select {
	case out := <-outc:
		return out
	case <-time.After(waitLimit):
		t.Fatalf("no end event within %v", waitLimit)
		return nil
	}
}

// result waits for a write's error.
func result(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(waitLimit):
		t.Fatalf("write still blocked after %v", waitLimit)
		return nil
	}
}

// pipeFull reports whether the stdin pipe of p holds as much as it can: a
// write to it is then blocked until the process reads.
func pipeFull(t *testing.T, p *Process) bool {
	t.Helper()
	p.inMu.Lock()
	f := p.stdin
	p.inMu.Unlock()
	if f == nil {
		t.Fatal("no stdin pipe")
	}
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var queued, size int
	var qerr, serr error
	if err := rc.Control(func(fd uintptr) {
		queued, qerr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
		size, serr = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
	}); err != nil {
		t.Fatal(err)
	}
	if qerr != nil || serr != nil {
		t.Fatalf("FIONREAD: %v; F_GETPIPE_SZ: %v", qerr, serr)
	}
	return queued >= size
}

// waitPipeFull blocks until a write to p's stdin is stuck on a full pipe.
func waitPipeFull(t *testing.T, p *Process, errc <-chan error) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !pipeFull(t, p) {
		select {
		case err := <-errc:
			t.Fatalf("write returned before the pipe filled: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("stdin pipe not full after %v", waitLimit)
		}
		runtime.Gosched()
	}
}

// A process that never reads its input must not hold a writer forever: the
// write gives up when its context ends, and the pipe works afterwards. A
// writer waiting for its turn behind the blocked one gives up too.
func TestWriteStdinContextGivesUp(t *testing.T) {
	tab := newTable(t, TableOptions{})
	p, _ := start(t, tab, Spec{Config: Config{Cmd: "/bin/sh", Args: []string{"-c", "sleep 300"}}, Stdin: true})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.WriteStdinContext(ctx, make([]byte, 4<<20)) }() // far more than a pipe holds
	waitPipeFull(t, p, errc)

	// A second writer queues behind the first; its context ending frees it
	// although the first write is still blocked.
	ctx2, cancel2 := context.WithCancel(context.Background())
	errc2 := make(chan error, 1)
	go func() { errc2 <- p.WriteStdinContext(ctx2, []byte("queued")) }()
	cancel2()
	select {
	case err := <-errc2:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("queued write = %v; want context.Canceled", err)
		}
	case err := <-errc:
		t.Fatalf("blocked write returned before its context ended: %v", err)
	case <-time.After(waitLimit):
		t.Fatalf("queued write still waiting %v after its context ended", waitLimit)
	}

	cancel()
	if err := result(t, errc); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not reading its input") {
		t.Fatalf("WriteStdinContext on a process that never reads = %v; want a context error saying so", err)
	}
	// A context that has already ended writes nothing.
	if err := p.WriteStdinContext(ctx, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("write with an ended context = %v; want context.Canceled", err)
	}
	// The pipe is still the process's: closing it works.
	if err := p.CloseStdin(); err != nil {
		t.Fatalf("CloseStdin after a cancelled write: %v", err)
	}
}

// A write that ends with its context leaves the pipe's deadline cleared: the
// next write to a process that reads goes through. The deadline is set from
// the context's AfterFunc, which may still be running when the write returns,
// so the pair is repeated many times, with the context cancelled before the
// write and while it runs.
func TestWriteStdinContextClearsDeadline(t *testing.T) {
	tab := newTable(t, TableOptions{})
	p, sub := start(t, tab, Spec{Config: Config{Cmd: "/bin/sh", Args: []string{"-c", "cat"}}, Stdin: true})
	outc := drain(sub)
	const rounds = 3000
	for i := range rounds {
		ctx, cancel := context.WithCancel(context.Background())
		if i%2 == 0 {
			cancel()
		} else {
			go cancel()
		}
		_ = p.WriteStdinContext(ctx, []byte("c\n")) // may or may not go in before the cancel lands
		live, stop := context.Background(), context.CancelFunc(func() {})
		if i%4 >= 2 {
			live, stop = context.WithCancel(context.Background()) // a deadline path that never fires
		}
		err := p.WriteStdinContext(live, []byte("L\n"))
		stop()
		if err != nil {
			t.Fatalf("round %d: write after a cancelled one: %v", i, err)
		}
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	out := receive(t, outc)
	if n := strings.Count(out.stdout.String(), "L\n"); n != rounds {
		t.Fatalf("output has %d of the %d live writes", n, rounds)
	}
}

// A write without a deadline takes its turn like any other, so a write
// whose context ends while it waits cannot cut it short.
func TestWriteStdinWithoutDeadlineIsNotCut(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tab := newTable(t, TableOptions{})
	// The process reads its input only once the test writes to the fifo.
	p, sub := start(t, tab, Spec{Config: Config{Cmd: "/bin/sh", Args: []string{"-c", `read x < "$0"; wc -c`, fifo}}, Stdin: true})
	outc := drain(sub)
	const size = 4 << 20
	errc := make(chan error, 1)
	go func() { errc <- p.WriteStdinContext(context.Background(), make([]byte, size)) }()
	waitPipeFull(t, p, errc)

	ctx, cancel := context.WithCancel(context.Background())
	errc2 := make(chan error, 1)
	go func() { errc2 <- p.WriteStdinContext(ctx, []byte("x")) }()
	cancel()
	if err := result(t, errc2); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write = %v; want context.Canceled", err)
	}

	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := result(t, errc); err != nil {
		t.Fatalf("write without a deadline was cut by another write's context: %v", err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if out := receive(t, outc); strings.TrimSpace(out.stdout.String()) != strconv.Itoa(size) {
		t.Fatalf("wc -c = %q, want %d", out.stdout.String(), size)
	}
}

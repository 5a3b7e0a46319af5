//go:build linux

package process

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestChunksAreAtMostMaxChunkSize(t *testing.T) {
	tab := newTable(t, TableOptions{})
	const total = 8 << 20
	p, sub := start(t, tab, Spec{Config: Config{Cmd: "head", Args: []string{"-c", strconv.Itoa(total), "/dev/zero"}}})
	out := collect(t, sub)
	if out.stdout.Len() != total {
		t.Fatalf("got %d bytes, want %d", out.stdout.Len(), total)
	}
	for _, n := range out.sizes {
		if n > MaxChunkSize || n == 0 {
			t.Fatalf("chunk of %d bytes", n)
		}
	}
	// A pipe grown for the bulk output is no longer counted once closed.
	select {
	case <-p.readersDone:
	case <-time.After(waitLimit):
		t.Fatal("the output readers did not finish")
	}
	if n := tab.grownPipes.Load(); n != 0 {
		t.Errorf("%d grown pipes counted after the process ended", n)
	}
}

func TestReadLarge(t *testing.T) {
	for _, tc := range []struct {
		n, size int
		want    bool
	}{
		{1, SmallChunkSize, false},
		{SmallChunkSize - 1, SmallChunkSize, false},
		{SmallChunkSize, SmallChunkSize, true}, // full: more was waiting
		{SmallChunkSize, MaxChunkSize, false},  // fits a small chunk again
		{SmallChunkSize + 1, MaxChunkSize, true},
		{MaxChunkSize, MaxChunkSize, true},
	} {
		if got := readLarge(tc.n, tc.size); got != tc.want {
			t.Errorf("readLarge(%d, %d) = %v, want %v", tc.n, tc.size, got, tc.want)
		}
	}
}

// A full pipe is grown to bulkPipeSize, but never more than maxGrownPipes
// at a time.
func TestGrowPipeIsBounded(t *testing.T) {
	p := &Process{table: newTable(t, TableOptions{})}
	grown := &p.table.grownPipes
	newPipeReader := func() *reader {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pr.Close(); pw.Close() })
		r, err := newReader(p, pr, Stdout)
		if err != nil {
			t.Fatal(err)
		}
		if r.pipeSize <= 0 || r.pipeSize >= bulkPipeSize {
			t.Fatalf("a new pipe holds %d bytes", r.pipeSize)
		}
		return r
	}
	capacity := func(r *reader) (n int) {
		_ = r.rc.Control(func(fd uintptr) { n = pipeCapacity(fd) })
		return n
	}

	grown.Store(maxGrownPipes - 1)
	r := newPipeReader()
	r.growPipe()
	if !r.grown || capacity(r) != bulkPipeSize || grown.Load() != maxGrownPipes {
		t.Errorf("grown=%v capacity=%d count=%d; want a pipe of %d bytes, counted", r.grown, capacity(r), grown.Load(), bulkPipeSize)
	}
	if r.pipeSize != 0 {
		t.Error("a grown pipe would be grown again")
	}

	other := newPipeReader()
	before := capacity(other)
	other.growPipe()
	if other.grown || capacity(other) != before || grown.Load() != maxGrownPipes {
		t.Errorf("beyond the limit: grown=%v capacity=%d count=%d", other.grown, capacity(other), grown.Load())
	}
	if other.pipeSize != 0 {
		t.Error("a pipe that was refused would be tried again")
	}
}

// Short output is read into small chunks, so a quiet process holds little.
func TestShortOutputUsesSmallChunks(t *testing.T) {
	tab := newTable(t, TableOptions{})
	_, sub := start(t, tab, Spec{Config: Config{Cmd: "echo", Args: []string{"hi"}}})
	defer sub.Close()
	for c := range sub.Chunks() {
		if len(c.buf) != SmallChunkSize {
			t.Errorf("a chunk of %d bytes for %q", len(c.buf), c.Bytes())
		}
		c.Release()
	}
}

// A subscriber that is behind when the process exits still gets every byte
// the process wrote, even with a grace period of almost nothing.
func TestSlowSubscriberGetsAllOutput(t *testing.T) {
	// With one chunk of buffer, the reader soon blocks on the subscriber and
	// the rest of the output waits in the pipe when the process exits.
	defer func(n int) { subscriptionBuffer = n }(subscriptionBuffer)
	subscriptionBuffer = 1
	tab := newTable(t, TableOptions{Grace: time.Nanosecond})
	for i := range 5 {
		// No more than the pipe holds, so the process can exit before
		// anyone reads.
		p, sub := start(t, tab, Spec{Config: Config{Cmd: "sh", Args: []string{"-c", `read n; head -c $n /dev/zero`}}, Stdin: true})
		total := min(pipeSize(t, p), 64<<10)
		if err := p.WriteStdinContext(context.Background(), []byte(strconv.Itoa(total)+"\n")); err != nil {
			t.Fatal(err)
		}
		waitGone(t, p.Pid())
		if out := collect(t, sub); out.stdout.Len() != total {
			t.Fatalf("run %d: got %d bytes, want %d", i, out.stdout.Len(), total)
		}
	}
}

// pipeSize returns the capacity of p's stdout pipe.
func pipeSize(t *testing.T, p *Process) int {
	size := 0
	err := p.readers[0].rc.Control(func(fd uintptr) {
		size, _ = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
	})
	if err != nil || size <= 0 {
		t.Fatalf("F_GETPIPE_SZ: %d, %v", size, err)
	}
	return size
}

func TestGoneSubscriberDoesNotBlock(t *testing.T) {
	tab := newTable(t, TableOptions{})
	p, sub := start(t, tab, Spec{Config: Config{Cmd: "head", Args: []string{"-c", "20000000", "/dev/zero"}}})
	sub.Close()
	sub.Close()
	select {
	case <-p.Done():
	case <-time.After(waitLimit):
		t.Fatal("process blocked by a closed subscription")
	}
	if end := p.Wait(); end.ExitCode != 0 {
		t.Errorf("end = %+v", end)
	}
}

func TestFanOutAndLateSubscribers(t *testing.T) {
	tab := newTable(t, TableOptions{})
	p, first := start(t, tab, Spec{Config: Config{Cmd: "sh", Args: []string{"-c", "read x; echo got $x"}}, Stdin: true, Tag: "fan"})
	second := p.Subscribe()
	if err := p.WriteStdinContext(context.Background(), []byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []*Subscription{first, second} {
		if out := collect(t, sub); out.stdout.String() != "got hi\n" {
			t.Errorf("stdout = %q", out.stdout.String())
		}
	}
	// Ended but retained: a late subscriber gets the End only.
	late := p.Subscribe()
	if out := collect(t, late); out.stdout.Len() != 0 || out.end.Status != "exit status 0" {
		t.Errorf("late subscriber: %q %+v", out.stdout.String(), out.end)
	}
	if got, err := tab.Get(p.Pid(), true); err != nil || got != p {
		t.Errorf("Get(%d) after end = %v, %v", p.Pid(), got, err)
	}
	if got, err := tab.GetTagged("fan", true); err != nil || got != p {
		t.Errorf("GetTagged after end = %v, %v", got, err)
	}
	// Without withEnded the retained process is not found.
	if _, err := tab.Get(p.Pid(), false); !errors.Is(err, ErrNotFound) || err.Error() != "process with pid "+strconv.Itoa(p.Pid())+" not found" {
		t.Errorf("Get(%d, false) after end = %v", p.Pid(), err)
	}
	if _, err := tab.GetTagged("fan", false); !errors.Is(err, ErrNotFound) || err.Error() != "process with tag 'fan' not found" {
		t.Errorf("GetTagged(fan, false) after end = %v", err)
	}
	if len(tab.List()) != 0 {
		t.Errorf("List after end = %v", tab.List())
	}
}

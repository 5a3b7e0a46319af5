//go:build linux

package process

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
)

// waitLimit bounds every wait in these tests; it only fires on failure.
const waitLimit = 20 * time.Second

var testEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "LANG=C"}

type output struct {
	stdout, stderr, pty bytes.Buffer
	sizes               []int
	end                 End
}

// collect reads sub until the End and returns everything.
func collect(t *testing.T, sub *Subscription) *output {
	t.Helper()
	defer sub.Close()
	out := &output{}
	timeout := time.After(waitLimit)
	for {
		select {
		case c, ok := <-sub.Chunks():
			if !ok {
				out.end = sub.End()
				return out
			}
			out.sizes = append(out.sizes, len(c.Bytes()))
			switch c.Stream {
			case Stdout:
				out.stdout.Write(c.Bytes())
			case Stderr:
				out.stderr.Write(c.Bytes())
			case PTY:
				out.pty.Write(c.Bytes())
			}
			c.Release()
		case <-timeout:
			t.Fatalf("no end event within %v", waitLimit)
		}
	}
}

func start(t *testing.T, tab *Table, spec Spec) (*Process, *Subscription) {
	t.Helper()
	if spec.Env == nil {
		spec.Env = testEnv
	}
	p, sub, err := tab.Start(spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", spec.Cmd, err)
	}
	t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL) })
	return p, sub
}

func newTable(t *testing.T, opts TableOptions) *Table {
	tab := NewTable(opts)
	t.Cleanup(tab.Close)
	return tab
}

// waitGone blocks until the process pid has exited (a zombie counts as gone).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		testenv.Missing(t, "pidfd_open (%v): run the tests on Linux 5.3 or later", err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(waitLimit/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd: %v", err)
		}
		if n == 0 {
			t.Fatalf("process %d still running after %v", pid, waitLimit)
		}
		return
	}
}

func TestArgsAndSeparateStreams(t *testing.T) {
	tab := newTable(t, TableOptions{})
	_, sub := start(t, tab, Spec{Config: Config{Cmd: "sh", Args: []string{"-c", `echo "out $1"; echo "err $2" >&2`, "sh", "a b", "c"}}})
	out := collect(t, sub)
	if got := out.stdout.String(); got != "out a b\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := out.stderr.String(); got != "err c\n" {
		t.Errorf("stderr = %q", got)
	}
	if out.end != (End{ExitCode: 0, Exited: true, Status: "exit status 0"}) {
		t.Errorf("end = %+v", out.end)
	}
}

func TestEnvIsExactlySpecEnv(t *testing.T) {
	t.Setenv("SANDBOX_MCP_DAEMON_ONLY", "leak")
	tab := newTable(t, TableOptions{})
	env := []string{"PATH=/usr/bin:/bin", "A=1", "A=2", "B=x y"}
	_, sub := start(t, tab, Spec{Config: Config{Cmd: "env"}, Env: env})
	out := collect(t, sub)
	got := strings.Split(strings.TrimSpace(out.stdout.String()), "\n")
	slices.Sort(got)
	want := []string{"A=2", "B=x y", "PATH=/usr/bin:/bin"}
	if !slices.Equal(got, want) {
		t.Errorf("env = %q, want %q", got, want)
	}
}

func TestCommandLookedUpInChildPATH(t *testing.T) {
	tab := newTable(t, TableOptions{})
	_, _, err := tab.Start(Spec{Config: Config{Cmd: "true"}, Env: []string{"PATH=/nonexistent"}})
	if !errors.Is(err, ErrExecutableNotFound) || err.Error() != "executable file not found: true" {
		t.Errorf("err = %v", err)
	}
	_, _, err = tab.Start(Spec{Config: Config{Cmd: "./missing"}, Env: testEnv, Dir: t.TempDir()})
	if !errors.Is(err, ErrExecutableNotFound) {
		t.Errorf("err = %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/sandbox-mcp-test-script", []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, sub := start(t, tab, Spec{Config: Config{Cmd: "sandbox-mcp-test-script"}, Env: []string{"PATH=/bin:" + dir}})
	if out := collect(t, sub); out.stdout.String() != "hi\n" {
		t.Errorf("stdout = %q", out.stdout.String())
	}
	// A file that is not executable.
	if err := os.WriteFile(dir+"/plain", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = tab.Start(Spec{Config: Config{Cmd: dir + "/plain"}, Env: testEnv})
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), dir+"/plain") {
		t.Errorf("err = %v", err)
	}
}

func TestWorkingDirectory(t *testing.T) {
	tab := newTable(t, TableOptions{})
	dir := t.TempDir()
	_, sub := start(t, tab, Spec{Config: Config{Cmd: "pwd"}, Dir: dir})
	if got := collect(t, sub).stdout.String(); got != dir+"\n" {
		t.Errorf("pwd = %q, want %q", got, dir)
	}
}

func TestExitCodesAndSignals(t *testing.T) {
	tab := newTable(t, TableOptions{})
	_, sub := start(t, tab, Spec{Config: Config{Cmd: "sh", Args: []string{"-c", "exit 3"}}})
	if end := collect(t, sub).end; end != (End{ExitCode: 3, Exited: true, Status: "exit status 3", Error: "exit status 3"}) {
		t.Errorf("end = %+v", end)
	}
	for sig, status := range map[syscall.Signal]string{syscall.SIGKILL: "signal: killed", syscall.SIGTERM: "signal: terminated"} {
		p, sub := start(t, tab, Spec{Config: Config{Cmd: "sleep", Args: []string{"100"}}})
		if err := p.Signal(sig); err != nil {
			t.Fatal(err)
		}
		want := End{ExitCode: -1, Exited: false, Status: status, Error: status}
		if end := collect(t, sub).end; end != want {
			t.Errorf("%v: end = %+v, want %+v", sig, end, want)
		}
		if err := p.Signal(sig); err != nil {
			t.Errorf("signal after end: %v", err)
		}
	}
}

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

func TestTagsAndRetention(t *testing.T) {
	tab := newTable(t, TableOptions{Retention: -1})
	older, _ := start(t, tab, Spec{Config: Config{Cmd: "sleep", Args: []string{"100"}}, Tag: "t"})
	newer, newerSub := start(t, tab, Spec{Config: Config{Cmd: "sleep", Args: []string{"100"}}, Tag: "t"})
	for _, withEnded := range []bool{true, false} {
		if got, _ := tab.GetTagged("t", withEnded); got != newer {
			t.Errorf("GetTagged(t, %v) picked %v, want newest pid %d", withEnded, got, newer.Pid())
		}
	}
	if list := tab.List(); len(list) != 2 || list[0] != older || list[1] != newer {
		t.Errorf("List = %v", list)
	}
	_ = newer.Signal(syscall.SIGKILL)
	collect(t, newerSub)
	// Retention is off: the ended one is gone, the older live one remains.
	for _, withEnded := range []bool{true, false} {
		if got, _ := tab.GetTagged("t", withEnded); got != older {
			t.Errorf("GetTagged(t, %v) after newest ended = %v, want pid %d", withEnded, got, older.Pid())
		}
	}
	if _, err := tab.Get(newer.Pid(), true); !errors.Is(err, ErrNotFound) || err.Error() != "process with pid "+strconv.Itoa(newer.Pid())+" not found" {
		t.Errorf("Get(ended) = %v", err)
	}
	if _, err := tab.GetTagged("nope", true); !errors.Is(err, ErrNotFound) || err.Error() != "process with tag 'nope' not found" {
		t.Errorf("GetTagged(nope) = %v", err)
	}
}

func TestBackgroundGrandchildDoesNotHoldEnd(t *testing.T) {
	tab := newTable(t, TableOptions{})
	_, sub := start(t, tab, Spec{Config: Config{Cmd: "sh", Args: []string{"-c", "sleep 100 & echo $!"}}})
	out := collect(t, sub)
	if out.end.ExitCode != 0 {
		t.Fatalf("end = %+v", out.end)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.stdout.String()))
	if err != nil {
		t.Fatalf("stdout %q: %v", out.stdout.String(), err)
	}
	// The grandchild was left alone (no SIGPIPE, no kill).
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("background sleep %d is gone: %v", pid, err)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

func TestDeadlineKillsProcessGroup(t *testing.T) {
	tab := newTable(t, TableOptions{})
	_, sub := start(t, tab, Spec{
		Config:  Config{Cmd: "sh", Args: []string{"-c", "sleep 100 & echo $!; wait"}},
		Timeout: 2 * time.Second,
	})
	out := collect(t, sub)
	want := End{ExitCode: -1, Status: "signal: killed", Error: "signal: killed", DeadlineExceeded: true}
	if out.end != want {
		t.Errorf("end = %+v, want %+v", out.end, want)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.stdout.String()))
	if err != nil {
		t.Fatalf("stdout %q: %v", out.stdout.String(), err)
	}
	waitGone(t, pid)
}

func TestPTY(t *testing.T) {
	tab := newTable(t, TableOptions{})
	p, sub := start(t, tab, Spec{
		Config: Config{Cmd: "sh", Args: []string{"-c", `stty size; read l; stty size; echo "[$l]"`}},
		PTY:    &Size{Cols: 100, Rows: 40},
	})
	if !p.IsPTY() {
		t.Fatal("IsPTY = false")
	}
	if err := p.WriteStdinContext(context.Background(), []byte("x")); !errors.Is(err, ErrTTY) {
		t.Errorf("WriteStdinContext = %v", err)
	}
	if err := p.CloseStdin(); !errors.Is(err, ErrTTY) || !strings.Contains(err.Error(), "Ctrl+D (0x04)") {
		t.Errorf("CloseStdin = %v", err)
	}
	var seen bytes.Buffer
	for !strings.Contains(seen.String(), "40 100") {
		select {
		case c := <-sub.Chunks():
			if c.Stream != PTY {
				t.Errorf("chunk from %v", c.Stream)
			}
			seen.Write(c.Bytes())
			c.Release()
		case <-time.After(waitLimit):
			t.Fatalf("no stty size output; got %q", seen.String())
		}
	}
	if err := p.Resize(Size{Cols: 90, Rows: 30}); err != nil {
		t.Fatal(err)
	}
	if err := p.WritePTY([]byte("typed\n")); err != nil {
		t.Fatal(err)
	}
	out := collect(t, sub)
	got := seen.String() + out.pty.String()
	for _, want := range []string{"typed\r\n", "30 90", "[typed]"} {
		if !strings.Contains(got, want) {
			t.Errorf("pty output %q lacks %q", got, want)
		}
	}
}

func TestCloseKillsAll(t *testing.T) {
	tab := NewTable(TableOptions{})
	// An ended process whose background child still holds its output.
	_, bgSub := start(t, tab, Spec{Config: Config{Cmd: "sh", Args: []string{"-c", "sleep 100 & echo $!"}}})
	bg := collect(t, bgSub)
	bgPid, err := strconv.Atoi(strings.TrimSpace(bg.stdout.String()))
	if err != nil {
		t.Fatalf("stdout %q: %v", bg.stdout.String(), err)
	}
	var subs []*Subscription
	for range 3 {
		_, sub := start(t, tab, Spec{Config: Config{Cmd: "sh", Args: []string{"-c", "sleep 100 & sleep 100"}}})
		subs = append(subs, sub)
	}
	tab.Close()
	tab.Close()
	for _, sub := range subs {
		if end := collect(t, sub).end; end.Status != "signal: killed" {
			t.Errorf("end = %+v", end)
		}
	}
	waitGone(t, bgPid)
	if _, _, err := tab.Start(Spec{Config: Config{Cmd: "true"}, Env: testEnv}); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close = %v", err)
	}
}

func BenchmarkStartTrue(b *testing.B) {
	tab := NewTable(TableOptions{})
	defer tab.Close()
	for b.Loop() {
		p, sub, err := tab.Start(Spec{Config: Config{Cmd: "true"}, Env: testEnv})
		if err != nil {
			b.Fatal(err)
		}
		sub.Close()
		p.Wait()
	}
}

func BenchmarkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStdout256MiB(b *testing.B) {
	const total = 256 << 20
	tab := NewTable(TableOptions{})
	defer tab.Close()
	b.SetBytes(total)
	for b.Loop() {
		_, sub, err := tab.Start(Spec{Config: Config{Cmd: "head", Args: []string{"-c", strconv.Itoa(total), "/dev/zero"}}, Env: testEnv})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for c := range sub.Chunks() {
			n += len(c.Bytes())
			c.Release()
		}
		sub.Close()
		if n != total {
			b.Fatalf("got %d bytes", n)
		}
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

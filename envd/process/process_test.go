//go:build linux

package process

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
		t.Skipf("pidfd_open unavailable: %v", err)
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
		if err := p.WriteStdin([]byte(s)); err != nil {
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
	err := p.WriteStdin([]byte("late"))
	if !errors.Is(err, ErrStdinClosed) || err.Error() != "stdin not enabled or closed for process with pid "+strconv.Itoa(p.Pid()) {
		t.Errorf("write after close: %v", err)
	}
}

func TestNoStdinReadsDevNull(t *testing.T) {
	tab := newTable(t, TableOptions{})
	p, sub := start(t, tab, Spec{Config: Config{Cmd: "cat"}})
	if err := p.WriteStdin([]byte("x")); !errors.Is(err, ErrStdinClosed) {
		t.Errorf("WriteStdin = %v", err)
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

func TestChunksAreAtMost32KiB(t *testing.T) {
	tab := newTable(t, TableOptions{})
	const total = 3 << 20
	_, sub := start(t, tab, Spec{Config: Config{Cmd: "head", Args: []string{"-c", strconv.Itoa(total), "/dev/zero"}}})
	out := collect(t, sub)
	if out.stdout.Len() != total {
		t.Fatalf("got %d bytes, want %d", out.stdout.Len(), total)
	}
	for _, n := range out.sizes {
		if n > ChunkSize || n == 0 {
			t.Fatalf("chunk of %d bytes", n)
		}
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
		if err := p.WriteStdin([]byte(strconv.Itoa(total) + "\n")); err != nil {
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
	if err := p.WriteStdin([]byte("hi\n")); err != nil {
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
	if got, err := tab.Get(p.Pid()); err != nil || got != p {
		t.Errorf("Get(%d) after end = %v, %v", p.Pid(), got, err)
	}
	if got, err := tab.GetTagged("fan"); err != nil || got != p {
		t.Errorf("GetTagged after end = %v, %v", got, err)
	}
	if len(tab.List()) != 0 {
		t.Errorf("List after end = %v", tab.List())
	}
}

func TestTagsAndRetention(t *testing.T) {
	tab := newTable(t, TableOptions{Retention: -1})
	older, _ := start(t, tab, Spec{Config: Config{Cmd: "sleep", Args: []string{"100"}}, Tag: "t"})
	newer, newerSub := start(t, tab, Spec{Config: Config{Cmd: "sleep", Args: []string{"100"}}, Tag: "t"})
	if got, _ := tab.GetTagged("t"); got != newer {
		t.Errorf("GetTagged picked pid %d, want newest %d", got.Pid(), newer.Pid())
	}
	if list := tab.List(); len(list) != 2 || list[0] != older || list[1] != newer {
		t.Errorf("List = %v", list)
	}
	_ = newer.Signal(syscall.SIGKILL)
	collect(t, newerSub)
	// Retention is off: the ended one is gone, the older live one remains.
	if got, _ := tab.GetTagged("t"); got != older {
		t.Errorf("GetTagged after newest ended = %v, want pid %d", got, older.Pid())
	}
	if _, err := tab.Get(newer.Pid()); !errors.Is(err, ErrNotFound) || err.Error() != "process with pid "+strconv.Itoa(newer.Pid())+" not found" {
		t.Errorf("Get(ended) = %v", err)
	}
	if _, err := tab.GetTagged("nope"); !errors.Is(err, ErrNotFound) || err.Error() != "process with tag 'nope' not found" {
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
	if err := p.WriteStdin([]byte("x")); !errors.Is(err, ErrTTY) {
		t.Errorf("WriteStdin = %v", err)
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

// A process that never reads its input must not hold a writer forever: the
// write gives up when its context ends, and the pipe works afterwards.
func TestWriteStdinContextGivesUp(t *testing.T) {
	tab := newTable(t, TableOptions{})
	p, _ := start(t, tab, Spec{Config: Config{Cmd: "/bin/sh", Args: []string{"-c", "sleep 300"}}, Stdin: true})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.WriteStdinContext(ctx, make([]byte, 4<<20)) }() // far more than a pipe holds
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not reading its input") {
		t.Fatalf("WriteStdinContext on a process that never reads = %v; want a context error saying so", err)
	}
	// The pipe is still the process's: closing it works.
	if err := p.CloseStdin(); err != nil {
		t.Fatalf("CloseStdin after a cancelled write: %v", err)
	}
}

// After a cancelled write, the deadline is cleared: a later write to a
// process that reads goes through.
func TestWriteStdinContextClearsDeadline(t *testing.T) {
	tab := newTable(t, TableOptions{})
	p, sub := start(t, tab, Spec{Config: Config{Cmd: "/bin/sh", Args: []string{"-c", "cat"}}, Stdin: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = p.WriteStdinContext(ctx, []byte("line\n")) // may or may not go in before the cancel lands
	if err := p.WriteStdinContext(context.Background(), []byte("after\n")); err != nil {
		t.Fatalf("write after a cancelled one: %v", err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if out := collect(t, sub).stdout.String(); !strings.HasSuffix(out, "after\n") {
		t.Fatalf("output %q lacks the later write", out)
	}
}

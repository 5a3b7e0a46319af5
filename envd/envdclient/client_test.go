//go:build linux

package envdclient_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

func sh(script string) envdclient.Command {
	return envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

func newClient(t testing.TB, endpoint string, opts ...envdclient.Option) *envdclient.Client {
	t.Helper()
	c, err := envdclient.New(endpoint, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// forEachNetwork runs f against an in-process daemon on a unix socket and on
// loopback TCP.
func forEachNetwork(t *testing.T, f func(t *testing.T, d *envdtest.Daemon, c *envdclient.Client)) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			d := envdtest.Serve(t, network, daemon.Config{Env: map[string]string{"GLOBAL": "g"}})
			f(t, d, newClient(t, d.Endpoint))
		})
	}
}

func TestRunBasics(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, d *envdtest.Daemon, c *envdclient.Client) {
		ctx := t.Context()
		if err := os.Mkdir(filepath.Join(d.Root, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		res, err := c.Run(ctx, envdclient.Command{
			Cmd:   "/bin/sh",
			Args:  []string{"-c", `printf '%s|' "$0" "$1" "$A" "$GLOBAL" "$(pwd)"; echo to-stderr >&2; cat; exit 7`, "arg zero", "arg one"},
			Env:   map[string]string{"A": "from-env"},
			Cwd:   "sub",
			Stdin: strings.NewReader("from-stdin"),
		}, envdclient.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := "arg zero|arg one|from-env|g|" + filepath.Join(d.Root, "sub") + "|from-stdin"
		if got := string(res.Stdout.Bytes()); got != want {
			t.Errorf("stdout = %q, want %q", got, want)
		}
		if got := string(res.Stderr.Bytes()); got != "to-stderr\n" {
			t.Errorf("stderr = %q", got)
		}
		if res.ExitCode != 7 || !res.Exited || res.TimedOut || res.Pid == 0 {
			t.Errorf("result = %+v", res)
		}
		if res.Stdout.Total != int64(len(want)) || res.Stdout.Truncated {
			t.Errorf("stdout accounting = %+v", res.Stdout)
		}
	})
}

func TestRunSignalDeathIsNeverZero(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	for _, tc := range []struct {
		sig  string
		code int
		name string
	}{{"KILL", 137, "killed"}, {"TERM", 143, "terminated"}, {"SEGV", 139, "segmentation fault"}} {
		res, err := c.Run(t.Context(), sh("kill -"+tc.sig+" $$"), envdclient.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Exited || res.ExitCode != tc.code || !strings.HasPrefix(res.Signal, tc.name) {
			t.Errorf("SIG%s: exited=%v code=%d signal=%q status=%q", tc.sig, res.Exited, res.ExitCode, res.Signal, res.Status)
		}
	}
}

// pidAlive reports whether pid exists and is not a zombie.
func pidAlive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestDeadlineKillsProcessGroup(t *testing.T) {
	d := envdtest.Serve(t, "unix", daemon.Config{})
	c := newClient(t, d.Endpoint)
	pidFile := filepath.Join(d.Root, "grandchild.pid")
	cmd := sh(`sleep 300 & echo $! > ` + pidFile + `; wait`)
	cmd.Timeout = 500 * time.Millisecond
	res, err := c.Run(t.Context(), cmd, envdclient.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Exited || res.ExitCode != 137 {
		t.Fatalf("result = %+v; want timed out, killed", res)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	// The group was SIGKILLed before the end event was sent; the kernel
	// finishes the grandchild off right after (a zombie counts as gone).
	if pid == 0 || !exitsSoon(t, pid) {
		t.Fatalf("grandchild %d survived the deadline", pid)
	}
}

// exitsSoon waits, through a pidfd (an event, not a poll), for pid to exit;
// it reports false if it still runs after a generous bound.
func exitsSoon(t *testing.T, pid int) bool {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 20_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
}

func TestCancelKillsProcess(t *testing.T) {
	d := envdtest.Serve(t, "unix", daemon.Config{})
	c := newClient(t, d.Endpoint)
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan uint32, 1)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Run(ctx, sh("sleep 300"), envdclient.RunOptions{OnStart: func(pid uint32) { started <- pid }})
		errc <- err
	}()
	pid := <-started
	cancel()
	err := <-errc
	if connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("Run after cancel = %v; want canceled", err)
	}
	if envdclient.IsPossibleLoss(err) {
		t.Errorf("a caller's cancellation must not look like a sandbox loss: %v", err)
	}
	// Run returns once the kill was acknowledged; the kernel ends the process
	// right after. Its end event (envd keeps it for late attachers) says how.
	res := waitEnd(t, c, envdclient.ByPid(pid))
	if res != nil && (res.Exited || res.Signal != "killed") {
		t.Fatalf("process %d after cancel: %+v; want killed", pid, res)
	}
	if pidAlive(int(pid)) {
		t.Fatalf("process %d still alive after its end event", pid)
	}
}

// waitEnd attaches to the selected process and waits for its end event; nil
// when envd no longer knows it at all.
func waitEnd(t *testing.T, c *envdclient.Client, sel envdclient.Selector) *envdclient.Result {
	t.Helper()
	h, err := c.Connect(t.Context(), sel, envdclient.RunOptions{})
	if envdclient.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestCancelBeforePidKillsByTag(t *testing.T) {
	d := envdtest.Serve(t, "unix", daemon.Config{})
	c := newClient(t, d.Endpoint, envdclient.WithKillTimeout(30*time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // abandoned before anything came back
	cmd := sh("sleep 300")
	cmd.Tag = "early-cancel"
	if _, err := c.Run(ctx, cmd, envdclient.RunOptions{}); connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("Run = %v; want canceled", err)
	}
	// Killed by tag (or by pid once its start event arrived): its end says so.
	if res := waitEnd(t, c, envdclient.ByTag("early-cancel")); res != nil && (res.Exited || res.Signal != "killed") {
		t.Fatalf("process tagged early-cancel after cancel: %+v; want killed", res)
	}
	procs, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Tag == "early-cancel" {
			t.Fatalf("process %d tagged early-cancel still running", p.Pid)
		}
	}
}

// gatedDaemon serves an in-process daemon's handler on its own socket, with
// hooks on Start (and WatchDir) calls: spawned receives once a call spawned
// its process (or watch) and sends its first bytes (envd answers the call
// with the start event), which wait until open is closed or the call ends;
// with headersFirst the response headers go out before the wait, the start
// event after it. started receives when such a handler returned, signalled
// when a SendSignal call was answered.
type gatedDaemon struct {
	endpoint     string
	headersFirst bool
	open         chan struct{}
	spawned      chan struct{}
	started      chan struct{}
	signalled    chan struct{}
}

func serveGated(t *testing.T, open, headersFirst bool) *gatedDaemon {
	t.Helper()
	d := envdtest.Serve(t, "unix", daemon.Config{})
	g := &gatedDaemon{headersFirst: headersFirst, open: make(chan struct{}),
		spawned: make(chan struct{}, 64), started: make(chan struct{}, 64), signalled: make(chan struct{}, 64)}
	if open {
		close(g.open)
	}
	h := d.D.Handler()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/process.Process/Start", "/filesystem.Filesystem/WatchDir":
			defer func() { g.started <- struct{}{} }()
			h.ServeHTTP(&gatedWriter{ResponseWriter: w, ctx: r.Context(), g: g}, r)
		case "/process.Process/SendSignal":
			defer func() { g.signalled <- struct{}{} }()
			h.ServeHTTP(w, r)
		default:
			h.ServeHTTP(w, r)
		}
	}), Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	sock := filepath.Join(envdtest.ShortTempDir(t), "g")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	g.endpoint = "unix:" + sock
	return g
}

// gatedWriter holds a Start response's first bytes until the gate opens.
type gatedWriter struct {
	http.ResponseWriter
	ctx  context.Context
	g    *gatedDaemon
	once sync.Once
}

func (w *gatedWriter) wait() error {
	w.once.Do(func() {
		if w.g.headersFirst {
			w.ResponseWriter.(http.Flusher).Flush()
		}
		w.g.spawned <- struct{}{}
	})
	select {
	case <-w.g.open:
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	if err := w.wait(); err != nil {
		return 0, err
	}
	return w.ResponseWriter.Write(p)
}

func (w *gatedWriter) Flush() {
	if w.wait() == nil {
		w.ResponseWriter.(http.Flusher).Flush()
	}
}

// within receives from ch, failing the test if nothing comes in a generous
// bound.
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s", what)
	}
}

// assertNoProcessTagged waits (bounded) for the end of any process tagged
// tag and fails if one is still running.
func assertNoProcessTagged(t *testing.T, c *envdclient.Client, tag string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	h, err := c.Connect(ctx, envdclient.ByTag(tag), envdclient.RunOptions{})
	if envdclient.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil {
		h.Disconnect()
		_ = c.Kill(t.Context(), envdclient.ByTag(tag))
		t.Fatalf("process tagged %s still running: %v", tag, err)
	}
	if res.Exited || res.Signal != "killed" {
		t.Fatalf("process tagged %s: %+v; want killed", tag, res)
	}
	procs, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Tag == tag {
			t.Fatalf("process %d tagged %s still listed after its end", p.Pid, tag)
		}
	}
}

// A Run or Start whose caller gives up after envd spawned the process but
// before its start event arrived kills it: by tag, then by the late pid.
// Before the answer's headers, the call itself must heed the caller.
func TestCancelledBeforeStartEventKills(t *testing.T) {
	calls := map[string]func(c *envdclient.Client, ctx context.Context, cmd envdclient.Command) error{
		"Run": func(c *envdclient.Client, ctx context.Context, cmd envdclient.Command) error {
			res, err := c.Run(ctx, cmd, envdclient.RunOptions{})
			if err == nil {
				err = fmt.Errorf("Run returned %+v", res)
			}
			return err
		},
		"Start": func(c *envdclient.Client, ctx context.Context, cmd envdclient.Command) error {
			h, err := c.Start(ctx, cmd, envdclient.StartOptions{})
			if err == nil {
				_ = h.Kill(context.Background())
				err = errors.New("Start returned a handle")
			}
			return err
		},
	}
	for name, call := range calls {
		for _, headersFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/headersFirst=%v", name, headersFirst), func(t *testing.T) {
				g := serveGated(t, false, headersFirst)
				c := newClient(t, g.endpoint, envdclient.WithKillTimeout(30*time.Second))
				ctx, cancel := context.WithCancel(t.Context())
				cmd := sh("exec sleep 300")
				cmd.Tag = "mid-cancel"
				errc := make(chan error, 1)
				go func() { errc <- call(c, ctx, cmd) }()
				within(t, g.spawned, "process spawned")
				cancel()
				// The abandoned call kills by tag while the start event is
				// still held.
				within(t, g.signalled, "kill after the cancelled call")
				close(g.open)
				select {
				case err := <-errc:
					if connect.CodeOf(err) != connect.CodeCanceled {
						t.Fatalf("call after cancel = %v; want canceled", err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("the cancelled call did not return")
				}
				assertNoProcessTagged(t, c, cmd.Tag)
			})
		}
	}
}

// A Watch whose caller gives up before envd answered returns at once.
func TestWatchCancelledBeforeStartEvent(t *testing.T) {
	g := serveGated(t, false, false)
	c := newClient(t, g.endpoint)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		w, err := c.Watch(ctx, "", envdclient.WatchOptions{})
		if err == nil {
			w.Close()
			err = errors.New("Watch returned a watcher")
		}
		errc <- err
	}()
	within(t, g.spawned, "watch started")
	cancel()
	select {
	case err := <-errc:
		if connect.CodeOf(err) != connect.CodeCanceled {
			t.Fatalf("Watch after cancel = %v; want canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled Watch did not return")
	}
	close(g.open)
}

// Starts whose context ended before they were called leave no process
// behind, whether or not envd spawned it.
func TestStartAlreadyCancelledKills(t *testing.T) {
	g := serveGated(t, true, false)
	c := newClient(t, g.endpoint, envdclient.WithKillTimeout(30*time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for i := range 10 {
		cmd := sh("exec sleep 300")
		cmd.Tag = fmt.Sprintf("start-cancelled-%d", i)
		if h, err := c.Start(ctx, cmd, envdclient.StartOptions{}); connect.CodeOf(err) != connect.CodeCanceled {
			if err == nil {
				_ = h.Kill(t.Context())
			}
			t.Fatalf("Start with a cancelled context = %v; want canceled", err)
		}
		// Once envd is done with the request, its process (if it spawned
		// one) is in its table.
		within(t, g.started, "end of the Start call in envd")
		assertNoProcessTagged(t, c, cmd.Tag)
	}
}

func TestBackgroundHandleReconnectAndList(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	ctx := t.Context()
	cmd := sh(`read line; echo "got $line"; read line2; echo "then $line2"; exit 3`)
	cmd.Tag = "bg-1"
	h, err := c.Start(ctx, cmd, envdclient.StartOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	procs, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range procs {
		found = found || (p.Pid == h.Pid() && p.Tag == "bg-1" && p.Cmd == "/bin/sh")
	}
	if !found {
		t.Fatalf("List = %+v; want pid %d tagged bg-1", procs, h.Pid())
	}
	// Drop the first handle: the process keeps running.
	h.Disconnect()
	byPid, err := c.Connect(ctx, envdclient.ByPid(h.Pid()), envdclient.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byTag, err := c.Connect(ctx, envdclient.ByTag("bg-1"), envdclient.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if byTag.Pid() != h.Pid() {
		t.Fatalf("connect by tag gave pid %d, want %d", byTag.Pid(), h.Pid())
	}
	if err := byPid.SendInput(ctx, []byte("one\ntwo\n")); err != nil {
		t.Fatal(err)
	}
	for _, hh := range []*envdclient.Handle{byPid, byTag} {
		res, err := hh.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(res.Stdout.Bytes()); got != "got one\nthen two\n" || res.ExitCode != 3 {
			t.Errorf("attached handle saw %q exit %d", got, res.ExitCode)
		}
	}
	if err := c.Kill(ctx, envdclient.ByPid(h.Pid())); err != nil {
		t.Errorf("Kill of an ended process = %v; want nil (already gone is success)", err)
	}
	if _, err := c.Connect(ctx, envdclient.ByPid(999999), envdclient.RunOptions{}); !envdclient.IsNotFound(err) {
		t.Errorf("Connect to an unknown pid = %v; want not_found", err)
	}
}

func TestCloseStdinGivesEOF(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	ctx := t.Context()
	h, err := c.Start(ctx, sh("wc -c"), envdclient.StartOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SendInput(ctx, []byte("12345")); err != nil {
		t.Fatal(err)
	}
	if err := h.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(res.Stdout.Bytes())) != "5" {
		t.Fatalf("wc saw %q", res.Stdout.Bytes())
	}
	// Closing twice is not an error (on a process that outlives its stdin).
	sleeper, err := c.Start(ctx, sh("exec sleep 300"), envdclient.StartOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := sleeper.CloseStdin(ctx); err != nil {
			t.Fatalf("CloseStdin: %v", err)
		}
	}
	if err := sleeper.Kill(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestPTYEchoAndResize(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	ctx := t.Context()
	cmd := sh(`stty size; read x; stty size; echo "typed:$x"`)
	cmd.PTY = &envdclient.PTYSize{Cols: 100, Rows: 40}
	h, err := c.Start(ctx, cmd, envdclient.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, envdclient.ByPid(h.Pid()), envdclient.PTYSize{Cols: 120, Rows: 50}); err != nil {
		t.Fatal(err)
	}
	if err := c.SendPTYInput(ctx, envdclient.ByPid(h.Pid()), []byte("hello\r")); err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout.Bytes())
	// The first stty may run before or after the resize; the second runs
	// after it. The terminal echoes what was typed as it arrives, before
	// the shell read it and printed "typed:".
	if !strings.Contains(out, "50 120") || !strings.Contains(out, "typed:hello") {
		t.Fatalf("pty output = %q", out)
	}
	if echo, typed := strings.Index(out, "hello"), strings.Index(out, "typed:"); echo < 0 || echo > typed {
		t.Fatalf("pty output = %q; want the terminal's echo of hello before typed:", out)
	}
}

// A program that writes 64 MiB before reading 1 MiB of stdin must not
// deadlock: stdin is fed while output is consumed. With a 1 MiB capture the
// client keeps head and tail only, and counts everything.
func TestLargeOutputWithStdin(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	const out, in = 64 << 20, 1 << 20
	res, err := c.Run(t.Context(), envdclient.Command{
		Cmd:   "/bin/sh",
		Args:  []string{"-c", fmt.Sprintf("head -c %d /dev/zero; head -c %d | wc -c >&2", out, in)},
		Stdin: bytes.NewReader(make([]byte, in)),
	}, envdclient.RunOptions{StdoutLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout.Total != out || !res.Stdout.Truncated || len(res.Stdout.Head)+len(res.Stdout.Tail) != 1<<20 {
		t.Errorf("stdout total=%d truncated=%v kept=%d", res.Stdout.Total, res.Stdout.Truncated, len(res.Stdout.Head)+len(res.Stdout.Tail))
	}
	if strings.TrimSpace(string(res.Stderr.Bytes())) != strconv.Itoa(in) || res.ExitCode != 0 {
		t.Errorf("stdin seen = %q exit %d", res.Stderr.Bytes(), res.ExitCode)
	}
}

func TestTeeGetsWholeStream(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	var tee bytes.Buffer
	res, err := c.Run(t.Context(), sh("seq 1 200000"), envdclient.RunOptions{StdoutLimit: 1000, Stdout: &tee})
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := 1; i <= 200000; i++ {
		fmt.Fprintln(&want, i)
	}
	if !bytes.Equal(tee.Bytes(), want.Bytes()) {
		t.Fatalf("tee got %d bytes, want %d", tee.Len(), want.Len())
	}
	if res.Stdout.Total != int64(want.Len()) || !bytes.HasPrefix(want.Bytes(), res.Stdout.Head) || !bytes.HasSuffix(want.Bytes(), res.Stdout.Tail) {
		t.Fatalf("capture head/tail do not match the stream")
	}
}

// tee is a writer that is not safe for concurrent use, as Run's Stdout may
// be: Run must not use it from two goroutines, nor after it returned.
type tee struct {
	onStart  bool // OnStart ran
	early    bool // a Write came before OnStart
	writes   int
	returned bool // Run returned
	late     bool // a Write came after Run returned
	first    func()
}

func (w *tee) Write(p []byte) (int, error) {
	w.writes++
	w.early = w.early || !w.onStart
	w.late = w.late || w.returned
	if w.writes == 1 && w.first != nil {
		w.first()
	}
	return len(p), nil
}

// Output reaches a tee writer only after OnStart, and never after Run
// returned, even when the caller gives up in the middle of a stream.
func TestTeeBetweenOnStartAndReturn(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &tee{first: cancel}
	_, err := c.Run(ctx, envdclient.Command{Cmd: "yes"}, envdclient.RunOptions{Stdout: w, OnStart: func(uint32) { w.onStart = true }})
	w.returned = true
	if connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("Run = %v; want canceled", err)
	}
	// Another call on the same client, while a stray write could still land.
	if _, err := c.Run(t.Context(), envdclient.Command{Cmd: "true"}, envdclient.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if w.writes == 0 || w.early || w.late {
		t.Errorf("writes=%d, before OnStart=%v, after Run returned=%v", w.writes, w.early, w.late)
	}
}

func TestFilesystem(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, d *envdtest.Daemon, c *envdclient.Client) {
		ctx := t.Context()
		created, err := c.MakeDir(ctx, "a/b")
		if err != nil || !created {
			t.Fatalf("MakeDir = %v, %v", created, err)
		}
		if created, err := c.MakeDir(ctx, "a/b"); err != nil || created {
			t.Fatalf("MakeDir of an existing dir = %v, %v; want false, nil", created, err)
		}
		if err := c.Upload(ctx, "a/b/f.txt", strings.NewReader("hello"), envdclient.UploadOptions{Metadata: map[string]string{"k": "v"}}); err != nil {
			t.Fatal(err)
		}
		e, err := c.Stat(ctx, "a/b/f.txt")
		if err != nil || e.Type != envdclient.TypeFile || e.Size != 5 || e.Path != filepath.Join(d.Root, "a/b/f.txt") {
			t.Fatalf("Stat = %+v, %v", e, err)
		}
		entries, err := c.ListDir(ctx, "a", 2)
		if err != nil || len(entries) != 2 {
			t.Fatalf("ListDir depth 2 = %+v, %v", entries, err)
		}
		moved, err := c.Move(ctx, "a/b/f.txt", "c/g.txt")
		if err != nil || moved.Name != "g.txt" {
			t.Fatalf("Move = %+v, %v", moved, err)
		}
		dl, err := c.DownloadRange(ctx, "c/g.txt", 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(dl)
		dl.Close()
		if string(got) != "ell" || dl.Size != 5 || dl.Offset != 1 {
			t.Fatalf("range = %q size %d offset %d", got, dl.Size, dl.Offset)
		}
		past, err := c.DownloadRange(ctx, "c/g.txt", 10, -1)
		if err != nil {
			t.Fatal(err)
		}
		if rest, _ := io.ReadAll(past); len(rest) != 0 || past.Size != 5 {
			t.Fatalf("range past the end = %q size %d", rest, past.Size)
		}
		if err := c.Remove(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := c.Remove(ctx, "a"); err != nil {
			t.Fatalf("Remove of a missing path = %v; want nil", err)
		}
		if _, err := c.Stat(ctx, "a"); !envdclient.IsNotFound(err) {
			t.Fatalf("Stat after Remove = %v; want not_found", err)
		}
		if _, err := c.Download(ctx, "missing"); !envdclient.IsNotFound(err) {
			t.Fatalf("Download of a missing file = %v; want not_found", err)
		}
	})
}

func TestBigFileRoundTrip(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	ctx := t.Context()
	const size = 50 << 20
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	if err := c.Upload(ctx, "big.bin", bytes.NewReader(data), envdclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	dl, err := c.Download(ctx, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	h := sha256.New()
	n, err := io.Copy(h, dl)
	if err != nil || n != size {
		t.Fatalf("download %d bytes, %v", n, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Fatal("sha256 differs after the round trip")
	}
}

func TestWatch(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	ctx := t.Context()
	if _, err := c.MakeDir(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, "w", envdclient.WatchOptions{Recursive: true, IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := c.Upload(ctx, "w/new.txt", strings.NewReader("x"), envdclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			// Uploads land under a temporary name and are renamed into place.
			if ev.Name == "new.txt" && (ev.Type == envdclient.EventCreate || ev.Type == envdclient.EventRename || ev.Type == envdclient.EventWrite) {
				return
			}
		case <-timeout:
			t.Fatal("no event for new.txt")
		}
	}
}

func TestTransportRules(t *testing.T) {
	for _, bad := range []string{"http://10.1.2.3:49983", "http://example.com", "ftp://127.0.0.1", "unix:", "https://h/path", "https://user:pw@h"} {
		if _, err := envdclient.New(bad); err == nil {
			t.Errorf("New(%q) succeeded; want refused", bad)
		}
	}
	for _, good := range []string{"http://127.0.0.1:1", "http://localhost:49983", "http://[::1]:2", "https://49983-abc.e2b.app", "unix:/tmp/x.sock"} {
		if _, err := envdclient.New(good); err != nil {
			t.Errorf("New(%q) = %v", good, err)
		}
	}

	// A redirect to another origin is refused, token or not.
	var leaked bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { leaked = true }))
	defer other.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	c := newClient(t, redirector.URL, envdclient.WithAccessToken("secret"))
	err := c.Health(t.Context())
	if err == nil || !strings.Contains(err.Error(), "leaves the configured origin") || leaked {
		t.Fatalf("Health through a cross-origin redirect = %v (leaked=%v)", err, leaked)
	}

	// A daemon with a token: no token → unauthenticated; right token works.
	d := envdtest.Serve(t, "unix", daemon.Config{AccessToken: "tok"})
	_, err = newClient(t, d.Endpoint).Run(t.Context(), sh("true"), envdclient.RunOptions{})
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Run without the token = %v; want unauthenticated", err)
	}
	if _, err := newClient(t, d.Endpoint).Stat(t.Context(), ""); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Stat without the token = %v; want unauthenticated", err)
	}
	if err := newClient(t, d.Endpoint).Upload(t.Context(), "x", strings.NewReader("x"), envdclient.UploadOptions{}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Upload without the token = %v; want unauthenticated", err)
	}
	if _, err := newClient(t, d.Endpoint, envdclient.WithAccessToken("tok")).Run(t.Context(), sh("true"), envdclient.RunOptions{}); err != nil {
		t.Fatalf("Run with the token = %v", err)
	}
}

func TestOldEnvdRefusesFiniteStdin(t *testing.T) {
	d := envdtest.Serve(t, "unix", daemon.Config{})
	c := newClient(t, d.Endpoint, envdclient.WithEnvdVersion("0.4.1"))
	_, err := c.Run(t.Context(), envdclient.Command{Cmd: "cat", Stdin: strings.NewReader("x")}, envdclient.RunOptions{})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "0.5.2") {
		t.Fatalf("Run with stdin on envd 0.4.1 = %v; want failed_precondition naming 0.5.2", err)
	}
	if err := c.CloseStdin(t.Context(), envdclient.ByPid(1)); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("CloseStdin on envd 0.4.1 = %v; want unimplemented", err)
	}
	v, err := newClient(t, d.Endpoint).Version(t.Context())
	if err != nil || v != daemon.Version {
		t.Fatalf("Version from /health = %q, %v", v, err)
	}
}

func TestLossPredicates(t *testing.T) {
	// A daemon killed mid-stream: the call may have partly run.
	p := envdtest.StartProcess(t)
	c := newClient(t, p.Endpoint)
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background(), sh("sleep 300"), envdclient.RunOptions{OnStart: func(uint32) { close(started) }})
		errc <- err
	}()
	<-started
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	if !envdclient.IsPossibleLoss(err) || envdclient.IsNotSent(err) {
		t.Fatalf("Run cut mid-stream = %v; want a possible loss that may have been sent", err)
	}
	// Nobody listens any more: nothing can be sent.
	_, err = c.Run(t.Context(), sh("true"), envdclient.RunOptions{})
	if !envdclient.IsPossibleLoss(err) || !envdclient.IsNotSent(err) {
		t.Fatalf("Run against a dead socket = %v; want a possible loss, not sent", err)
	}
	var dial *envdclient.DialError
	if !errors.As(err, &dial) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dead socket error %v is not a DialError wrapping ECONNREFUSED", err)
	}

	// A proxy answering 502 (E2B's "sandbox not found") is a possible loss;
	// a 404 from envd is not.
	for status, loss := range map[int]bool{502: true, 503: true, 504: true, 404: false, 400: false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"code":%d,"message":"The sandbox was not found"}`, status)
		}))
		pc := newClient(t, srv.URL)
		_, serr := pc.Stat(t.Context(), "x")
		_, derr := pc.Download(t.Context(), "x")
		_, rerr := pc.Run(t.Context(), sh("true"), envdclient.RunOptions{})
		for what, e := range map[string]error{"rpc": serr, "rest": derr, "stream": rerr} {
			if envdclient.IsPossibleLoss(e) != loss {
				t.Errorf("HTTP %d via %s: IsPossibleLoss(%v) = %v, want %v", status, what, e, !loss, loss)
			}
		}
		srv.Close()
	}
}

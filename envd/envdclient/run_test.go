//go:build linux

package envdclient_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

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

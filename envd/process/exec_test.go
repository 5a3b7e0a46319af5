//go:build linux

package process

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

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

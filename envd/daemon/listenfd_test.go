//go:build linux

package daemon_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// listeningSocket binds and listens on a unix socket in a fresh directory
// and returns its path and an *os.File of the listening socket (the
// net.Listener itself is closed without removing the path).
func listeningSocket(t *testing.T) (string, *os.File) {
	t.Helper()
	sock := filepath.Join(envdtest.ShortTempDir(t), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	_ = ln.Close()
	t.Cleanup(func() { _ = f.Close() })
	return sock, f
}

// Listen("fd:N") serves on a listening socket the caller already holds, and
// takes the descriptor over.
func TestListenFD(t *testing.T) {
	sock, f := listeningSocket(t)
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := daemon.Listen("fd:" + strconv.Itoa(fd))
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.Serve(ln) }()
	t.Cleanup(func() { _ = d.Close() })
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://envd/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("/health over the inherited socket: %d", resp.StatusCode)
	}
}

func TestListenFDErrors(t *testing.T) {
	regular, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(pair[0])
	defer syscall.Close(pair[1])
	// Listen takes an open descriptor over, refused or not: it gets
	// duplicates, so the test's own stay open.
	dup := func(fd int) string {
		n, err := syscall.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(n)
	}
	for addr, want := range map[string]string{
		"fd:":                          "want fd:N",
		"fd:x":                         "want fd:N",
		"fd:2":                         "want fd:N",
		"fd:1000000":                   "not open",
		"fd:" + dup(int(regular.Fd())): "not a listening socket",
		"fd:" + dup(pair[0]):           "not a listening socket",
	} {
		if ln, err := daemon.Listen(addr); err == nil || !strings.Contains(err.Error(), want) {
			if ln != nil {
				ln.Close()
			}
			t.Errorf("Listen(%q) = %v; want an error saying %q", addr, err, want)
		}
	}
}

// `sandbox-mcp envd --listen fd:3` serves on the socket its parent passed,
// and no process it starts inherits that socket: nothing in a sandbox can
// accept the connections meant for envd.
func TestEnvdBinaryListensOnInheritedSocket(t *testing.T) {
	bin := envdtest.Binary(t)
	sock, f := listeningSocket(t)
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "envd", "--listen", "fd:3", "--root", root, "--ready-fd", "4")
	cmd.ExtraFiles = []*os.File{f, pw}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pw.Close()
	_ = f.Close()
	line, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("envd --listen fd:3 did not become ready: %q, %v", line, err)
	}
	c, err := envdclient.New("unix:" + sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Run(t.Context(), envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", `for f in /proc/$$/fd/*; do echo "$f $(readlink $f)"; done`}}, envdclient.RunOptions{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	out := string(res.Stdout.Bytes())
	if want := "socket:[" + strconv.FormatUint(st.Ino, 10) + "]"; strings.Contains(out, want) {
		t.Errorf("a process envd started holds envd's listening socket %s:\n%s", want, out)
	}
}

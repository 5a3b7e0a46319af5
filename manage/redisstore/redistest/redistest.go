//go:build unix

// Package redistest runs a real redis-server for tests: on a unix socket in
// a temporary directory (and, on request, a loopback TCP port), with no
// persistence, stopped when the test ends. A machine without redis-server
// makes the test SKIP, or fail under CI=true (internal/testenv).
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
)

// Server is one redis-server process (or none, between Stop and Start).
type Server struct {
	t      testing.TB
	dir    string
	socket string
	port   int // 0: no TCP listener

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Option configures Start.
type Option func(*Server)

// WithTCP makes the server listen on a free loopback port too.
func WithTCP() Option {
	return func(s *Server) { s.port = -1 }
}

// Start runs a redis-server for t and stops it when t ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(t, "redis-server on PATH (Debian: apt-get install redis-server; scripts/test installs it)")
	}
	// Unix socket paths are limited to 108 bytes; test temp dirs can be long.
	dir, err := os.MkdirTemp("", "rds")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, dir: dir, socket: filepath.Join(dir, "redis.sock")}
	for _, o := range opts {
		o(s)
	}
	if s.port < 0 {
		s.port = freePort(t)
	}
	t.Cleanup(func() {
		s.Stop()
		os.RemoveAll(dir)
	})
	s.Start()
	return s
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// URL is the server's unix:// URL.
func (s *Server) URL() string { return "unix://" + s.socket }

// TCPURL is the server's redis:// URL on loopback (WithTCP only).
func (s *Server) TCPURL() string {
	if s.port == 0 {
		s.t.Fatal("redistest: TCPURL of a server started without WithTCP")
	}
	return "redis://127.0.0.1:" + strconv.Itoa(s.port) + "/0"
}

// Socket is the path of the server's unix socket.
func (s *Server) Socket() string { return s.socket }

// Start starts the server again after Stop, on the same addresses, empty
// (nothing is persisted). It returns once the server accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--unixsocket", s.socket, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "notice",
	}
	cmd := exec.Command("redis-server", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	// redis-server says when it accepts connections; its log is kept for
	// the failure message.
	ready := make(chan struct{})
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if !signalled && strings.Contains(strings.ToLower(sc.Text()), "ready to accept connections") {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		if !signalled {
			close(ready)
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
	}
	if _, err := os.Stat(s.socket); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logMu.Lock()
		defer logMu.Unlock()
		s.t.Fatalf("redis-server did not start: %v\n%s", err, log.String())
	}
	s.cmd = cmd
}

// Stop kills the server (its data is gone) and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
	os.Remove(s.socket)
}

// Freeze stops the server's process (SIGSTOP): connections stay open and
// commands go unanswered, as with a hung server. Thaw resumes it, data kept.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: %v to a stopped server", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(fmt.Errorf("redistest: %v: %w", sig, err))
	}
}

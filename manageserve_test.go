//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2b"
)

// manageServeWorkdir is the workspace root of manage serve's sandboxes
// (local and docker providers both mount it there).
const manageServeWorkdir = "/workspace"

// manageServeConfig configures startManageServe; the zero value is a fresh
// server over the local provider with a new key and state directory.
type manageServeConfig struct {
	// APIKey is the accepted key. Default: a new random e2b_… key.
	APIKey string
	// StateDir is the server's --state-dir (give the same one to a restarted
	// server). Default: a new directory removed when the test ends.
	StateDir string
	// Args are more flags for `manage serve`.
	Args []string
}

// manageServer is a running `sandbox-mcp manage serve` process on loopback:
// its management API and envd proxy share URL.
type manageServer struct {
	URL      string
	APIKey   string
	StateDir string
	// Workdir is the workspace root of its sandboxes (give it to the e2b
	// provider: --e2b-workdir, e2b.Config.Workdir).
	Workdir string

	cmd     *exec.Cmd
	mu      sync.Mutex
	stderr  strings.Builder
	stopped bool
}

// startManageServe starts the built binary's `manage serve` on 127.0.0.1
// with a free port, waits for its ready line, and when the test ends kills
// the sandboxes the key still has and stops the server with SIGTERM. It
// needs root (bubblewrap sandboxes as the tests run them).
func startManageServe(t testing.TB, cfg manageServeConfig) *manageServer {
	t.Helper()
	testenv.RequireRoot(t)
	bin := envdtest.Binary(t)
	if cfg.APIKey == "" {
		cfg.APIKey = randomE2BKey()
	}
	if cfg.StateDir == "" {
		dir := envdtest.ShortTempDir(t)
		// Searchable by the unprivileged user bwrap runs sandboxes as.
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		cfg.StateDir = filepath.Join(dir, "manage")
	}
	args := append([]string{"manage", "serve", "--log-level", "warn", "--listen", "127.0.0.1:0",
		"--api-key", cfg.APIKey, "--state-dir", cfg.StateDir, "--ready-fd", "3"}, cfg.Args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &manageServer{APIKey: cfg.APIKey, StateDir: cfg.StateDir, Workdir: manageServeWorkdir}
	s.cmd = exec.Command(bin, args...)
	s.cmd.ExtraFiles = []*os.File{pw}
	s.cmd.Stderr = lockedWriter{mu: &s.mu, w: &s.stderr}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	line, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if err != nil || !strings.HasPrefix(line, "ready http://") {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		t.Fatalf("manage serve did not become ready (%q, %v):\n%s", line, err, s.Stderr())
	}
	s.URL = strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	t.Cleanup(func() {
		if s.isStopped() {
			return
		}
		s.killAll(t)
		s.Stop(t)
	})
	return s
}

func randomE2BKey() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return "e2b_" + hex.EncodeToString(b)
}

// ServeFlags are the flags that point `serve --provider e2b` at s.
func (s *manageServer) ServeFlags() []string {
	return []string{"--provider", "e2b", "--e2b-api-url", s.URL, "--e2b-sandbox-url", s.URL,
		"--e2b-api-key", s.APIKey, "--e2b-workdir", s.Workdir}
}

// Client is a management API client with s's key.
func (s *manageServer) Client(t testing.TB) *e2b.Client {
	t.Helper()
	c, err := e2b.NewClient(s.URL, s.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Stderr is what the server has logged so far.
func (s *manageServer) Stderr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

func (s *manageServer) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// Stop ends the server with SIGTERM and expects a clean exit. Its sandboxes
// stay (their records are in StateDir) for a server started again on it.
func (s *manageServer) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("manage serve did not stop cleanly on SIGTERM: %v\n%s", err, s.Stderr())
	}
}

// killAll kills every sandbox of s's key, so none outlives the test.
func (s *manageServer) killAll(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(t)
	all, err := c.List(ctx, e2b.ListOptions{})
	if err != nil {
		t.Errorf("listing manage serve's sandboxes at the end: %v", err)
		return
	}
	for _, sb := range all {
		if _, err := c.Kill(ctx, sb.SandboxID); err != nil {
			t.Errorf("killing sandbox %s at the end: %v", sb.SandboxID, err)
		}
	}
}

// lockedWriter serialises writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

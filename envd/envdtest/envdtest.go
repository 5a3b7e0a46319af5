//go:build linux

// Package envdtest starts real envd daemons for tests: in the test process
// (on a unix socket or loopback TCP) or as the built sandbox-mcp binary in a
// child process, waiting for readiness through --ready-fd rather than polling.
package envdtest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
)

// Daemon is a running in-process daemon.
type Daemon struct {
	// Endpoint is what client.New takes ("unix:/…" or "http://127.0.0.1:port").
	Endpoint string
	// Root is the daemon's root directory.
	Root string
	// D is the daemon itself.
	D *daemon.Daemon
}

// ShortTempDir returns a temporary directory with a short path (unix socket
// paths are limited to 108 bytes), removed when the test ends.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "et")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Serve starts cfg in the test process on network "unix" or "tcp" (loopback)
// and stops it when the test ends. cfg.Root defaults to a new temp dir.
func Serve(t testing.TB, network string, cfg daemon.Config) *Daemon {
	t.Helper()
	dir := ShortTempDir(t)
	if cfg.Root == "" {
		cfg.Root = filepath.Join(dir, "root")
		if err := os.Mkdir(cfg.Root, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var addr, endpoint string
	switch network {
	case "unix":
		addr = "unix:" + filepath.Join(dir, "s")
		endpoint = addr
	case "tcp":
		addr = "127.0.0.1:0"
	default:
		t.Fatalf("network %q", network)
	}
	ln, err := daemon.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	if network == "tcp" {
		endpoint = "http://" + ln.Addr().String()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Shutdown(ctx)
		<-done
	})
	return &Daemon{Endpoint: endpoint, Root: cfg.Root, D: d}
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error

	leanOnce sync.Once
	leanPath string
	leanErr  error
)

// Binary returns the sandbox-mcp command built by [BuildBinary]. A machine
// without the go command is a missing part (see internal/testenv: a skip,
// under CI=true a failure); a build that fails fails the test.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := BuildBinary()
	if errors.Is(err, exec.ErrNotFound) {
		testenv.Missing(t, "the go command, to build the sandbox-mcp binary (%v): put Go on PATH", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// BuildBinary builds the sandbox-mcp command, with the test hooks (build
// tag testhooks), once per test process and returns its path; every later
// call returns the same result. Tests call [Binary]; BuildBinary is for
// TestMain, where there is no testing.TB.
//
// Test binaries have no global cleanup, so builds do not go to a temporary
// directory per process (which would never be removed) but to one cache
// directory per user (os.UserCacheDir()/sandbox-mcp-test), named by their
// content: concurrent test processes of the same tree share one file, a
// process never sees another's different build under its path, and builds
// unused for a day are removed when the next one lands.
func BuildBinary() (string, error) {
	buildOnce.Do(func() {
		buildPath, buildErr = build("sandbox-mcp", func(out string) error {
			// testhooks: the faults tests of the binary set off through
			// the environment (SANDBOX_MCP_TEST_*), absent from releases.
			return goBuild(nil, "-tags", "testhooks", "-o", out, "github.com/sandbox-mcp/sandbox-mcp")
		})
	})
	return buildPath, buildErr
}

// LeanPackage is the lean envd command: the daemon without the MCP server.
const LeanPackage = "github.com/sandbox-mcp/sandbox-mcp/envd/cmd/sandbox-envd"

// LeanBinary builds the lean envd command (LeanPackage) for this machine
// once per test process, exactly as BuildLean builds what sandbox-mcp
// embeds, and returns its path; builds are cached as Binary's are.
func LeanBinary(t testing.TB) string {
	t.Helper()
	leanOnce.Do(func() {
		leanPath, leanErr = build("sandbox-envd", func(out string) error {
			return BuildLean(out, runtime.GOARCH)
		})
	})
	if leanErr != nil {
		t.Fatal(leanErr)
	}
	return leanPath
}

// BuildLean builds the lean envd for linux/goarch into out as `make envd`
// does (the Makefile's ENVD_BUILD): static (CGO_ENABLED=0), without paths,
// VCS stamps or symbol tables, so the same tree and toolchain always give
// the same bytes.
func BuildLean(out, goarch string) error {
	return goBuild([]string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + goarch},
		"-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, LeanPackage)
}

// binaryTTL is how long an unused build stays in the cache directory.
const binaryTTL = 24 * time.Hour

// goBuild runs `go build args…` in the module root with env added to this
// process's environment.
func goBuild(env []string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return nil
}

// build runs buildTo on a temporary path in the cache directory and renames
// the result to name-<the first 16 hex digits of its SHA-256>.
func build(name string, buildTo func(out string) error) (string, error) {
	cache, err := binaryCacheDir()
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, name)
	if err := buildTo(out); err != nil {
		return "", err
	}
	sum, err := fileSHA256(out)
	if err != nil {
		return "", err
	}
	// A rename never touches a file another process runs: it replaces the
	// name, and the same name always means the same bytes.
	path := filepath.Join(cache, name+"-"+sum[:16])
	if err := os.Rename(out, path); err != nil {
		return "", err
	}
	pruneBuilds(cache, path)
	return path, nil
}

// binaryCacheDir returns (and makes) the per-user directory of builds:
// under os.UserCacheDir, or without a home directory a private directory in
// the temporary directory named by the uid.
func binaryCacheDir() (string, error) {
	if base, err := os.UserCacheDir(); err == nil {
		dir := filepath.Join(base, "sandbox-mcp-test")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}
		return dir, nil
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("sandbox-mcp-test-%d", os.Getuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	// In a shared temporary directory, use it only if it is ours alone.
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("test build directory %s is not a private directory of uid %d", dir, os.Getuid())
	}
	return dir, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// pruneBuilds removes builds (and leftovers of interrupted ones) not
// renewed for binaryTTL; keep is the build just made.
func pruneBuilds(dir, keep string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		info, err := e.Info()
		if path == keep || err != nil || time.Since(info.ModTime()) < binaryTTL {
			continue
		}
		if strings.HasPrefix(e.Name(), "sandbox-mcp-") || strings.HasPrefix(e.Name(), "sandbox-envd-") || strings.HasPrefix(e.Name(), "build-") {
			_ = os.RemoveAll(path)
		}
	}
}

// moduleRoot finds the repository root from this file's location.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Process is a daemon running as a child process.
type Process struct {
	Endpoint string
	Root     string
	Cmd      *exec.Cmd
	stderr   *strings.Builder
	mu       *sync.Mutex
}

// Stderr returns what the daemon logged so far.
func (p *Process) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// StartProcess runs `sandbox-mcp envd` as a child on a unix socket with the
// extra flags given, waits until it is ready, and kills it when the test
// ends.
func StartProcess(t testing.TB, extra ...string) *Process {
	t.Helper()
	bin := Binary(t)
	dir := ShortTempDir(t)
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"envd", "--listen", "unix:" + sock, "--root", root, "--ready-fd", "3"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.ExtraFiles = []*os.File{pw}
	var mu sync.Mutex
	stderr := &strings.Builder{}
	cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return stderr.Write(p)
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	line, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if err != nil || !strings.HasPrefix(line, "ready ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("envd did not become ready (%q, %v): %s", line, err, stderr.String())
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &Process{Endpoint: "unix:" + sock, Root: root, Cmd: cmd, stderr: stderr, mu: &mu}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// PeakRSS returns a process's peak resident set size in bytes (VmHWM).
func PeakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM for pid %d", pid)
}

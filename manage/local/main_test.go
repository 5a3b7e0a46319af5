//go:build linux

package local

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// testRoot holds everything the tests make: the daemon binaries and the
// state directories. It is searchable by everyone (0711) so bwrap can run as the
// unprivileged sandbox user and still reach them, as a real state directory
// would be set up.
// inheritedFD is the number of a directory descriptor the tests hold open
// without close-on-exec.
const inheritedFD = 100

var (
	testRoot string
	// envdBinary is the lean envd (envd/cmd/sandbox-envd), built as `make
	// envd` builds what sandbox-mcp embeds: what sandboxes run.
	envdBinary string
	// serverBinary is the sandbox-mcp binary (a link to, or a copy of,
	// envdtest's one build under testRoot, where the unprivileged sandbox
	// user can reach it), for tests that run the server and for its `envd`
	// subcommand, what sandboxes run without an embedded envd.
	serverBinary string
	placeErr     error
	leanErr      error
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	root, err := os.MkdirTemp("", "local-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(root) }()
	if err := os.Chmod(root, 0o711); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testRoot = root
	// Stand in for a descriptor the server inherited from its parent
	// (opened without O_CLOEXEC): it must not reach any sandbox.
	// (A high number, as the low ones are replaced in children by the
	// descriptors they are given.)
	if fd, err := syscall.Open(root, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err == nil {
		if err := syscall.Dup3(fd, inheritedFD, 0); err == nil {
			defer func() { _ = syscall.Close(inheritedFD) }()
		}
		_ = syscall.Close(fd)
	}
	bin := filepath.Join(root, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	serverBinary = filepath.Join(bin, "sandbox-mcp")
	// A build error is reported by needBinary, through envdtest.Binary.
	if built, err := envdtest.BuildBinary(); err == nil {
		placeErr = linkOrCopy(built, serverBinary)
	}
	envdBinary = filepath.Join(bin, "sandbox-envd")
	leanErr = envdtest.BuildLean(envdBinary, runtime.GOARCH)
	return m.Run()
}

// linkOrCopy makes dst the file src: a hard link, or a copy (mode 0755)
// where src is on another filesystem.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// needBinary ends the test unless envdBinary is there: a missing go command
// is a missing part (testenv.Missing), a failed build a failure.
func needBinary(t testing.TB) {
	t.Helper()
	envdtest.Binary(t)
	if placeErr != nil {
		t.Fatalf("place the sandbox-mcp binary under %s: %v", testRoot, placeErr)
	}
	if leanErr != nil {
		t.Fatalf("build the lean envd: %v", leanErr)
	}
}

// logBuffer collects a provider's logs for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// newStateDir returns a fresh state directory under testRoot.
func newStateDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(testRoot, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killDetached(dir) })
	return dir
}

// killDetached kills the daemons left running in stateDir once its test is
// done: named workspaces' daemons outlive their Providers (detach.go).
func killDetached(stateDir string) {
	entries, _ := os.ReadDir(filepath.Join(stateDir, "sandboxes"))
	for _, e := range entries {
		if !validID(e.Name()) {
			continue
		}
		dir := filepath.Join(stateDir, "sandboxes", e.Name())
		rec, err := readRecord(dir)
		if err != nil || !rec.EndedAt.IsZero() {
			continue
		}
		cg := rec.cgroup(e.Name())
		if pid := rec.livePID(); pid != 0 {
			killProcs(cg, pid, rec.Isolation)
		}
		if cg != nil && cg.exists() {
			_ = cg.remove(context.Background())
		}
		unmountVolume(dir)
	}
}

// newProvider starts a provider on a fresh state directory (unless cfg names
// one), running the lean envd unless cfg names another envd, and closes it
// when the test ends.
func newProvider(t testing.TB, cfg Config) *Provider {
	t.Helper()
	needBinary(t)
	if cfg.StateDir == "" {
		cfg.StateDir = newStateDir(t)
	}
	if cfg.EnvdBinary == "" && cfg.embedded == nil {
		cfg.EnvdBinary = envdBinary
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(&testWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// testWriter sends logs to t.Log while the test runs.
type testWriter struct {
	t  testing.TB
	mu sync.Mutex
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// defaultProbe is what Probe finds with the default configuration, probed once
// per test binary.
var defaultProbe struct {
	once sync.Once
	caps Capabilities
}

// requireBwrap ends the test through testenv.Missing when bubblewrap does
// not work here.
func requireBwrap(t testing.TB) {
	t.Helper()
	needBinary(t)
	defaultProbe.once.Do(func() {
		dir, err := os.MkdirTemp(testRoot, "probe")
		if err == nil {
			err = os.Chmod(dir, 0o711)
		}
		if err != nil {
			defaultProbe.caps.BwrapError = err.Error()
			return
		}
		defaultProbe.caps = Probe(context.Background(), Config{StateDir: dir, EnvdBinary: envdBinary})
	})
	if !defaultProbe.caps.BwrapUsable {
		testenv.Missing(t, "a working bubblewrap (%s): install bubblewrap and allow unprivileged user namespaces; sandbox-mcp doctor names the fix for this machine", defaultProbe.caps.BwrapError)
	}
}

// needBwrap starts a provider that must isolate with bwrap.
func needBwrap(t testing.TB, cfg Config) *Provider {
	t.Helper()
	requireBwrap(t)
	cfg.Isolation = IsolationBwrap
	return newProvider(t, cfg)
}

// testCtx is a context for one step that only times out on failure.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func create(t testing.TB, p *Provider, cfg manage.SandboxConfig) manage.Sandbox {
	t.Helper()
	sb, err := p.Create(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return sb
}

// connect returns an envd client for sandbox id.
func connectTo(t testing.TB, p *Provider, id string) *envdclient.Client {
	t.Helper()
	ep, err := p.Endpoint(testCtx(t), id)
	if err != nil {
		t.Fatalf("Endpoint(%s): %v", id, err)
	}
	c, err := envdclient.New(ep.URL, append([]envdclient.Option{envdclient.WithEnvdVersion(ep.EnvdVersion)}, ep.ClientOptions...)...)
	if err != nil {
		t.Fatalf("envdclient.New(%s): %v", ep.URL, err)
	}
	t.Cleanup(c.Close)
	return c
}

// sh runs script with /bin/sh -c in the sandbox and returns its result.
func sh(t testing.TB, c *envdclient.Client, script string) *envdclient.Result {
	t.Helper()
	res, err := c.Run(testCtx(t), envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}, envdclient.RunOptions{})
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	return res
}

// shOK runs script, requires exit status 0 and returns its trimmed stdout.
func shOK(t testing.TB, c *envdclient.Client, script string) string {
	t.Helper()
	res := sh(t, c, script)
	if res.ExitCode != 0 {
		t.Fatalf("run %q: exit %d, stdout %q, stderr %q", script, res.ExitCode, res.Stdout.Bytes(), res.Stderr.Bytes())
	}
	return strings.TrimSpace(string(res.Stdout.Bytes()))
}

// shFails runs script and requires a non-zero exit status.
func shFails(t testing.TB, c *envdclient.Client, script string) string {
	t.Helper()
	res := sh(t, c, script)
	if res.ExitCode == 0 {
		t.Fatalf("run %q: succeeded, want a failure; stdout %q", script, res.Stdout.Bytes())
	}
	return string(res.Stderr.Bytes())
}

// sandboxPids returns the host pids of a sandbox's processes: the processes
// whose command line names the sandbox's directory (bwrap, or an unisolated
// envd) and all their descendants.
func sandboxPids(t testing.TB, p *Provider, id string) (roots, all []int) {
	t.Helper()
	dir := p.dir(id)
	parents := procParents()
	for pid := range parents {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			continue
		}
		if bytes.Contains(cmdline, []byte(dir+"/")) && !bytes.Contains(cmdline, []byte("go-build")) {
			roots = append(roots, pid)
		}
	}
	// bwrap's pid 1 in the sandbox is a fork of bwrap, with the same
	// command line: keep only the outermost.
	outer := roots[:0]
	for _, pid := range roots {
		if !slices.Contains(roots, parents[pid]) {
			outer = append(outer, pid)
		}
	}
	roots = outer
	for _, root := range roots {
		all = append(all, descendants(root)...)
	}
	return roots, all
}

// cmdline returns a process's command line with spaces between arguments.
func cmdline(pid int) string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
}

// dir returns the host directory of sandbox id.
func (p *Provider) dir(id string) string {
	return filepath.Join(p.sandboxesDir, id)
}

// daemonOf returns the current daemon of sandbox id.
func (p *Provider) daemonOf(id string) *daemon {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.entries[id]; ok {
		return e.d
	}
	return nil
}

// daemonDone returns a channel closed when this Provider's daemon of sandbox
// id exits (killed, crashed, or stopped by Kill or Close, of this or another
// Provider). For a sandbox this Provider runs no daemon for (stopped, or run
// by another Provider) the channel is already closed.
func (p *Provider) daemonDone(id string) <-chan struct{} {
	if d := p.daemonOf(id); d != nil {
		return d.done
	}
	closed := make(chan struct{})
	close(closed)
	return closed
}

// waitDone waits for the daemon of id to exit, via the provider's own
// notification.
func waitDone(t testing.TB, p *Provider, id string) {
	t.Helper()
	select {
	case <-p.daemonDone(id):
	case <-time.After(30 * time.Second):
		t.Fatalf("daemon of %s did not exit", id)
	}
}

// sandboxProc identifies a process across pid reuse: pid and start time.
type sandboxProc struct {
	pid   int
	start string
}

// snapshot records pids with their start times.
func snapshot(pids []int) []sandboxProc {
	var out []sandboxProc
	for _, pid := range pids {
		out = append(out, sandboxProc{pid, procStart(pid)})
	}
	return out
}

// checkEnded requires that none of the processes recorded by snapshot runs
// user code any more: each is gone, a zombie, or exiting (its memory already
// released, so /proc shows no command line; a namespace's pid 1 waits so
// for the rest of its namespace).
func checkEnded(t testing.TB, procs []sandboxProc) {
	t.Helper()
	for _, sp := range procs {
		st := procState(sp.pid)
		if st != 0 && st != 'Z' && st != 'X' && procStart(sp.pid) == sp.start && cmdline(sp.pid) != "" {
			t.Errorf("process %d (%s, state %c) of the sandbox still runs", sp.pid, cmdline(sp.pid), st)
		}
	}
}

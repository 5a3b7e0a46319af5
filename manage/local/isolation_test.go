//go:build linux

package local

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

func TestBwrapIsolation(t *testing.T) {
	p := needBwrap(t, Config{})
	a := create(t, p, manage.SandboxConfig{})
	b := create(t, p, manage.SandboxConfig{})
	ca, cb := connectTo(t, p, a.ID), connectTo(t, p, b.ID)

	t.Run("host files", func(t *testing.T) {
		secretDir, err := os.MkdirTemp(testRoot, "secret")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(secretDir, 0o755); err != nil {
			t.Fatal(err)
		}
		secret := filepath.Join(secretDir, "secret.txt")
		if err := os.WriteFile(secret, []byte("top secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		if stderr := shFails(t, ca, "cat "+secret); !strings.Contains(stderr, "No such file") {
			t.Errorf("cat %s: %q, want no such file", secret, stderr)
		}
		shFails(t, ca, "ls /root")
		shFails(t, ca, "ls /home")
		shFails(t, ca, "ls "+testRoot)
		shFails(t, ca, "ls "+p.stateDir)
		if got := shOK(t, ca, "ls -A /"); strings.Contains(got, "root") || strings.Contains(got, "home") || strings.Contains(got, "var") {
			t.Errorf("root directory holds host directories: %q", got)
		}
		// System directories are there, read-only; /dev/shm is usable.
		shOK(t, ca, "test -x /bin/sh && test -r /etc/passwd && ls /usr/bin >/dev/null && touch /dev/shm/x")
		shFails(t, ca, "touch /usr/x")
		shFails(t, ca, "touch /etc/x")
		if p.Capabilities().SandboxUID != 0 {
			// uid 1000 inside is not root outside: root-only host files
			// stay closed.
			if stderr := shFails(t, ca, "cat /etc/shadow"); !strings.Contains(stderr, "Permission denied") {
				t.Errorf("cat /etc/shadow: %q, want permission denied", stderr)
			}
		}
	})

	t.Run("file descriptors", func(t *testing.T) {
		// Nothing the test process inherited or opened reaches the
		// sandbox: a process there holds its stdio and pipes, no host
		// file or directory.
		out := shOK(t, ca, `for f in /proc/self/fd/*; do echo "$(basename $f) $(readlink $f)"; done`)
		for _, line := range strings.Split(out, "\n") {
			fd, target, _ := strings.Cut(line, " ")
			switch {
			case fd == "0" || fd == "1" || fd == "2":
			case strings.HasPrefix(target, "pipe:"), strings.HasPrefix(target, "socket:"),
				strings.HasPrefix(target, "anon_inode:"), strings.HasPrefix(target, "/proc/"), target == "/dev/null", target == "":
			default:
				t.Errorf("fd %s in the sandbox refers to %s", fd, target)
			}
		}
	})

	t.Run("identity", func(t *testing.T) {
		if got := shOK(t, ca, "id -u; id -g"); got != "1000\n1000" {
			t.Errorf("uid and gid inside: %q, want 1000 1000", got)
		}
		if got := shOK(t, ca, "hostname"); got != a.ID {
			t.Errorf("hostname %q, want the sandbox id %q", got, a.ID)
		}
	})

	t.Run("processes", func(t *testing.T) {
		shFails(t, ca, fmt.Sprintf("test -e /proc/%d/cmdline && grep -q local.test /proc/%d/cmdline", os.Getpid(), os.Getpid()))
		out := shOK(t, ca, "ps -e -o pid=,comm=")
		lines := strings.Split(out, "\n")
		if len(lines) > 6 {
			t.Errorf("ps shows %d processes, want only the sandbox's few:\n%s", len(lines), out)
		}
		if strings.Contains(out, "local.test") || strings.Contains(out, "systemd") {
			t.Errorf("host processes visible:\n%s", out)
		}
	})

	t.Run("sandboxes apart", func(t *testing.T) {
		shOK(t, ca, "echo from-a > /workspace/a.txt && echo from-a > /tmp/a.txt")
		shFails(t, cb, "cat /workspace/a.txt")
		shFails(t, cb, "cat /tmp/a.txt")
		shFails(t, cb, "ls "+p.dir(a.ID))
		if got := shOK(t, cb, "ls -A /workspace /tmp | tr '\\n' ' '"); strings.Contains(got, "a.txt") {
			t.Errorf("sandbox b sees a's files: %q", got)
		}
		// Nor its processes.
		if out := shOK(t, cb, "ps -e -o pid=,comm="); strings.Count(out, "\n") > 5 {
			t.Errorf("ps in b:\n%s", out)
		}
	})

	t.Run("network off", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ln.Close() }()
		go acceptAll(ln)
		port := ln.Addr().(*net.TCPAddr).Port
		stderr := shFails(t, ca, fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d'", port))
		if !strings.Contains(stderr, "refused") && !strings.Contains(stderr, "unreachable") {
			t.Errorf("connecting to the host's listener failed for another reason: %q", stderr)
		}
		hostNet, _ := os.Readlink("/proc/self/ns/net")
		if inside := shOK(t, ca, "readlink /proc/self/ns/net"); inside == hostNet {
			t.Errorf("sandbox without network shares the host's network namespace %s", hostNet)
		}
		// Only a loopback device.
		if out := shOK(t, ca, "ls /sys/class/net 2>/dev/null || cat /proc/net/dev"); strings.Contains(out, "eth") {
			t.Errorf("network devices inside: %q", out)
		}
	})
}

// acceptAll accepts and closes connections until ln is closed.
func acceptAll(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}

func TestBwrapNetworkOn(t *testing.T) {
	p := needBwrap(t, Config{})
	sb := create(t, p, manage.SandboxConfig{Network: manage.NetworkPolicyOn()})
	c := connectTo(t, p, sb.ID)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go acceptAll(ln)
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	if inside := shOK(t, c, "readlink /proc/self/ns/net"); inside != hostNet {
		t.Errorf("network namespace inside %s, want the host's %s", inside, hostNet)
	}
	// The host's loopback is reachable because the namespace is shared.
	shOK(t, c, fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d'", ln.Addr().(*net.TCPAddr).Port))
}

func TestNoIsolation(t *testing.T) {
	logs := &logBuffer{}
	p := newProvider(t, Config{Isolation: IsolationNone, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if p.Isolation() != IsolationNone {
		t.Fatalf("Isolation() = %q", p.Isolation())
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "not isolated") {
		t.Errorf("New logged no warning about the missing isolation:\n%s", logs)
	}
	sb := create(t, p, manage.SandboxConfig{Env: map[string]string{"GREETING": "hi"}})
	ws := filepath.Join(p.dir(sb.ID), "workspace")
	if sb.Isolation != "none" || sb.Workdir != ws || len(sb.Warnings) == 0 || !strings.Contains(sb.Warnings[0], "NOT isolated") {
		t.Errorf("Create = %+v; want isolation none, workdir %s and a warning", sb, ws)
	}
	info, err := p.Info(testCtx(t), sb.ID)
	if err != nil || info.State != manage.StateRunning || len(info.Warnings) == 0 {
		t.Errorf("Info = %+v, %v; want running with the warning", info, err)
	}
	c := connectTo(t, p, sb.ID)
	if got := shOK(t, c, `echo "$(pwd) $HOME $TMPDIR $LANG $GREETING"`); got != fmt.Sprintf("%s %s %s C.UTF-8 hi", ws, ws, filepath.Join(p.dir(sb.ID), "tmp")) {
		t.Errorf("cwd and environment: %q", got)
	}
	// --confine: the file API refuses paths outside the workspace.
	if d, err := c.Download(testCtx(t), "/etc/passwd"); err == nil {
		data, _ := io.ReadAll(d)
		_ = d.Close()
		t.Errorf("download /etc/passwd succeeded (%d bytes), want a refusal", len(data))
	}
	if _, err := c.ListDir(testCtx(t), "/etc", 1); err == nil {
		t.Errorf("ListDir /etc succeeded, want a refusal")
	}
	if err := c.Upload(testCtx(t), "inside.txt", strings.NewReader("ok"), envdclient.UploadOptions{}); err != nil {
		t.Errorf("upload inside the workspace: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "inside.txt")); err != nil || string(data) != "ok" {
		t.Errorf("uploaded file: %q, %v", data, err)
	}
}

func TestAutoFallsBackWithoutWorkingBwrap(t *testing.T) {
	fake := fakeBwrap(t)
	logs := &logBuffer{}
	p := newProvider(t, Config{Isolation: IsolationAuto, BwrapPath: fake, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if p.Isolation() != IsolationNone {
		t.Fatalf("Isolation() = %q, want none", p.Isolation())
	}
	caps := p.Capabilities()
	if caps.BwrapUsable || !strings.Contains(caps.BwrapError, "No permissions to create new namespace") || caps.BwrapVersion != "bubblewrap 0.8.0" {
		t.Errorf("Capabilities = %+v", caps)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "No permissions to create new namespace") {
		t.Errorf("log has no warning quoting bwrap:\n%s", l)
	}
	sb := create(t, p, manage.SandboxConfig{})
	if sb.Isolation != IsolationNone || len(sb.Warnings) == 0 {
		t.Errorf("Create = %+v", sb)
	}
	shOK(t, connectTo(t, p, sb.ID), "true")
}

func TestExplicitBwrapThatFails(t *testing.T) {
	needBinary(t)
	fake := fakeBwrap(t)
	_, err := New(context.Background(), Config{StateDir: newStateDir(t), EnvdBinary: envdBinary, Isolation: IsolationBwrap, BwrapPath: fake})
	if err == nil || !strings.Contains(err.Error(), "No permissions to create new namespace") {
		t.Fatalf("New = %v; want an error quoting bwrap", err)
	}
	_, err = New(context.Background(), Config{StateDir: newStateDir(t), EnvdBinary: envdBinary, Isolation: IsolationBwrap, BwrapPath: filepath.Join(testRoot, "no-such-bwrap")})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("New with a missing bwrap = %v", err)
	}
}

// fakeBwrap writes a bwrap that answers --version and fails everything else
// the way bwrap fails where user namespaces are refused (nested containers).
func fakeBwrap(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(testRoot, "fake")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bwrap")
	script := `#!/bin/sh
if [ "$1" = --version ]; then echo "bubblewrap 0.8.0"; exit 0; fi
echo "bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces." >&2
exit 1
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestProbe(t *testing.T) {
	needBinary(t)
	caps := Probe(context.Background(), Config{StateDir: newStateDir(t), EnvdBinary: envdBinary})
	t.Logf("capabilities: %+v", caps)
	if caps.BwrapPath == "" {
		testenv.Missing(t, "bwrap (%s): install bubblewrap (apt-get install bubblewrap)", caps.BwrapError)
	}
	if !caps.BwrapUsable || caps.BwrapError != "" || !strings.HasPrefix(caps.BwrapVersion, "bubblewrap ") || !caps.UserNamespaces {
		t.Errorf("bwrap: %+v", caps)
	}
	if _, err := os.Stat("/sys/fs/cgroup/freezer"); err == nil && os.Geteuid() == 0 {
		if caps.CgroupVersion != 1 || !caps.Freezer || !caps.MemoryLimit || !caps.PidsLimit || !caps.CPULimit {
			t.Errorf("cgroups on this v1 host: %+v", caps)
		}
	}
	if os.Geteuid() == 0 && (caps.SandboxUID != DefaultSandboxIDs.First || caps.DropError != "") {
		t.Errorf("sandboxes of a root server run as host uid %d (%s), want %d", caps.SandboxUID, caps.DropError, DefaultSandboxIDs.First)
	}
}

func TestInvalidIDs(t *testing.T) {
	p := newProvider(t, Config{Isolation: IsolationNone})
	for _, id := range []string{"", "../x", "L123", "a/b", "a.b", strings.Repeat("a", 65), "l1 2"} {
		info, err := p.Info(testCtx(t), id)
		if err != nil || info.State != manage.StateGone {
			t.Errorf("Info(%q) = %+v, %v; want gone", id, info, err)
		}
		for name, call := range map[string]func(context.Context, string) error{"Kill": p.Kill, "Pause": p.Pause, "Resume": p.Resume} {
			if err := call(testCtx(t), id); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("%s(%q) = %v; want InvalidArgument", name, id, err)
			}
		}
		if _, err := p.Endpoint(testCtx(t), id); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Endpoint(%q) = %v; want InvalidArgument", id, err)
		}
	}
	if err := p.Kill(testCtx(t), "lnosuchsandbox0"); err != nil {
		t.Errorf("Kill of an unknown id: %v", err)
	}
	if err := p.Pause(testCtx(t), "lnosuchsandbox0"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Pause of an unknown id: %v", err)
	}
	if err := p.Resume(testCtx(t), "lnosuchsandbox0"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Resume of an unknown id: %v", err)
	}
}

func TestCreateRejectsBadConfig(t *testing.T) {
	p := newProvider(t, Config{Isolation: IsolationNone})
	for _, cfg := range []manage.SandboxConfig{
		{Template: "python"},
		{Env: map[string]string{"A=B": "x"}},
		{Env: map[string]string{"LIST": "a,b"}},
		{Limits: manage.Limits{Pids: -1}},
	} {
		if _, err := p.Create(testCtx(t), cfg); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Create(%+v) = %v; want InvalidArgument", cfg, err)
		}
	}
	if list, err := p.List(testCtx(t)); err != nil || len(list) != 0 {
		t.Errorf("List after refused creates = %v, %v; want empty", list, err)
	}
}

func TestStateDirUnreachableByTheSandboxUser(t *testing.T) {
	// Only a root server runs bwrap as another user.
	testenv.RequireRoot(t)
	// Like /root/.local/state: a parent the unprivileged host user cannot
	// search. bwrap then runs as root's uid, with a warning.
	private, err := os.MkdirTemp(testRoot, "private")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	p := needBwrap(t, Config{StateDir: filepath.Join(private, "state"), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	caps := p.Capabilities()
	if !strings.Contains(caps.DropError, private) || !strings.Contains(caps.DropFix, "chmod o+x "+private) || caps.SandboxUID != 0 || p.cred != nil {
		t.Errorf("Capabilities = %+v; want a DropError and DropFix naming %s, and sandbox uid 0", caps, private)
	}
	if pc := Probe(context.Background(), Config{StateDir: filepath.Join(private, "state"), EnvdBinary: envdBinary}); pc.DropError != caps.DropError || pc.DropFix != caps.DropFix {
		t.Errorf("Probe = %+v; want the same DropError and DropFix as New", pc)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "maps to the server's uid") {
		t.Errorf("no warning about the root mapping:\n%s", logs)
	}
	sb := create(t, p, manage.SandboxConfig{})
	if got := shOK(t, connectTo(t, p, sb.ID), "id -u"); got != "1000" {
		t.Errorf("uid inside: %q", got)
	}
}

func TestUnreachableBinaryIsCopied(t *testing.T) {
	// Only a root server runs bwrap as another user.
	testenv.RequireRoot(t)
	needBinary(t)
	// The binary under a directory the sandbox user cannot search (like
	// /root/go/bin); the state directory under an ordinary 0755 one, made
	// 0700 by whoever came first (the workspace store does that).
	private, err := os.MkdirTemp(testRoot, "private")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(private, "sandbox-mcp")
	copyFile(t, envdBinary, bin)
	parent, err := os.MkdirTemp(testRoot, "public")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(parent, "state")
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	binDir := filepath.Join(stateDir, "bin")
	if err := os.Mkdir(binDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Copies of other versions: one unused for long, one recent.
	stale, recent := filepath.Join(binDir, copyPrefix+"0000000000000000"), filepath.Join(binDir, copyPrefix+"1111111111111111")
	for _, f := range []string{stale, recent} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleCopyAge)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}

	logs := &logBuffer{}
	p := needBwrap(t, Config{StateDir: stateDir, EnvdBinary: bin, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	caps := p.Capabilities()
	if caps.DropError != "" || caps.SandboxUID != DefaultSandboxIDs.First || caps.SandboxIDs != DefaultSandboxIDs || p.cred == nil || p.hostIDs == nil {
		t.Fatalf("Capabilities = %+v; want bwrap as uid %d (per-sandbox ids) without a DropError", caps, DefaultSandboxIDs.First)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("New warned:\n%s", logs)
	}
	want, err := copyPath(binDir, bin)
	if err != nil {
		t.Fatal(err)
	}
	if caps.EnvdBinary != want {
		t.Errorf("EnvdBinary = %q, want the copy %q", caps.EnvdBinary, want)
	}
	for path, mode := range map[string]os.FileMode{stateDir: 0o711, filepath.Join(stateDir, "sandboxes"): 0o711, binDir: 0o711, want: 0o755} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v; want mode %04o", path, fi.Mode(), err, mode)
		}
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale copy is still there: %v", err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a recent copy of another version was removed: %v", err)
	}

	sb := create(t, p, manage.SandboxConfig{})
	c := connectTo(t, p, sb.ID)
	if got := shOK(t, c, "id -u; echo x > owned"); got != "1000" {
		t.Errorf("uid inside: %q", got)
	}
	hostID, ok := p.hostIDs.recorded(p.dir(sb.ID))
	if fi, err := os.Stat(filepath.Join(p.dir(sb.ID), "workspace", "owned")); err != nil || !ok || ownerUID(fi) != hostID {
		t.Errorf("a file the sandbox made: %v, owner %d; want owner %d, the sandbox's own host id", err, ownerUID(fi), hostID)
	}

	// Another Provider reuses the copy; one removed meanwhile comes back.
	p2 := needBwrap(t, Config{StateDir: stateDir, EnvdBinary: bin})
	if p2.Capabilities().EnvdBinary != want {
		t.Errorf("second Provider runs %q, want %q", p2.Capabilities().EnvdBinary, want)
	}
	if err := os.Remove(want); err != nil {
		t.Fatal(err)
	}
	shOK(t, c, "true") // the running sandbox keeps its bound copy
	sb2 := create(t, p2, manage.SandboxConfig{})
	shOK(t, connectTo(t, p2, sb2.ID), "true")
	if _, err := os.Stat(want); err != nil {
		t.Errorf("the copy was not installed again: %v", err)
	}

	// doctor's Probe names the copy without a DropError.
	if pc := Probe(context.Background(), Config{StateDir: stateDir, EnvdBinary: bin}); pc.DropError != "" || pc.EnvdBinary != want || !pc.BwrapUsable {
		t.Errorf("Probe = %+v", pc)
	}
}

// copyFile copies src to dst with mode 0755.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

//go:build linux

package local

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// fakeSocket listens on a unix socket of the host that a hostile sandbox
// would like the server to talk to; nothing ever accepts on it.
func fakeSocket(t *testing.T) (string, *net.UnixListener) {
	t.Helper()
	dir, err := os.MkdirTemp(testRoot, "fake")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "host.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return path, ln
}

// whoami asks the sandbox behind c for its hostname, which bwrap sets to
// the sandbox's id.
func whoami(t *testing.T, c *envdclient.Client) string {
	t.Helper()
	return shOK(t, c, "cat /proc/sys/kernel/hostname")
}

// A sandbox's /.sandbox-mcp/run was the host's run/ directory, bound
// writable, and envd listened on run/envd.sock there. Inside sandbox A a
// tenant replaced the socket with a symlink to sandbox B's socket (or to
// any unix socket of the host); once the client's idle connection closed,
// A's next calls ran in B, or went to whatever listened on the host. The
// server now makes the socket itself where no sandbox can see it, and
// checks the path before each dial. The attack, done as a tenant would:
// A's calls still reach A, B is untouched, and the host socket never sees a
// connection.
func TestHostileSandboxCannotRedirectItsSocket(t *testing.T) {
	p := needBwrap(t, Config{})
	a := create(t, p, manage.SandboxConfig{})
	b := create(t, p, manage.SandboxConfig{})
	ca, cb := connectTo(t, p, a.ID), connectTo(t, p, b.ID)
	if got := whoami(t, ca); got != a.ID {
		t.Fatalf("sandbox A says it is %q, want %s", got, a.ID)
	}
	fake, fakeLn := fakeSocket(t)
	bSock := socketPath(p.dir(b.ID))
	aSock := socketPath(p.dir(a.ID))

	// What A can see of the server's side: the run directory is empty, the
	// socket's directory is nowhere.
	if got := shOK(t, ca, "ls -A "+insideRun); got != "" {
		t.Errorf("%s in the sandbox holds %q; want nothing of the server's", insideRun, got)
	}
	shFails(t, ca, "ls "+filepath.Dir(aSock))
	shFails(t, ca, "ls "+p.dir(a.ID))

	// The old attack, verbatim, and its variants: symlinks to B's socket
	// and to the host socket wherever A can write, including the paths of
	// the server's own directories recreated inside the sandbox.
	shOK(t, ca, fmt.Sprintf(`set -e
cd %[1]s
ln -s %[2]s envd.sock
ln -s %[3]s fake.sock
mkdir -p %[4]s %[5]s
ln -sf %[2]s %[4]s/envd.sock
ln -sfn %[1]s %[5]s/ctl || true
ln -s %[3]s /workspace/envd.sock
ln -s %[3]s /tmp/envd.sock`, insideRun, bSock, fake, filepath.Dir(aSock), p.dir(a.ID)+"-x"))

	// Every idle connection closes (as after the client's idle timeout),
	// so the next call dials again; and a client made afresh from the
	// Endpoint, as after a server restart.
	for round, c := range []*envdclient.Client{ca, connectTo(t, p, a.ID)} {
		c.Close()
		if got := whoami(t, c); got != a.ID {
			t.Fatalf("round %d: A's call ran in %q, want A (%s)", round, got, a.ID)
		}
		if _, err := c.Stat(testCtx(t), insideRun+"/envd.sock"); err != nil {
			t.Fatalf("round %d: A's own symlink is not visible to A: %v", round, err)
		}
	}
	if envdtest.Connected(t, fakeLn) {
		t.Error("the host socket the sandbox pointed at was connected to")
	}
	if got := whoami(t, cb); got != b.ID {
		t.Errorf("sandbox B says it is %q, want %s", got, b.ID)
	}
	if _, err := cb.Stat(testCtx(t), insideRun+"/envd.sock"); !envdclient.IsNotFound(err) {
		t.Errorf("B's run directory holds envd.sock (%v); want A's doings to stay in A", err)
	}
	if s, err := p.Info(testCtx(t), a.ID); err != nil || s.State != manage.StateRunning {
		t.Errorf("Info(A) = %+v, %v; want running", s, err)
	}
	// (connected would have seen a connection.)
	conn, err := net.Dial("unix", fake)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !envdtest.Connected(t, fakeLn) {
		t.Fatal("connected missed a waiting connection")
	}
}

// Nothing in the sandbox but envd holds the listening socket, so no
// sandbox process can accept the server's connections in envd's place.
func TestOnlyEnvdHoldsItsListeningSocket(t *testing.T) {
	p := needBwrap(t, Config{})
	a := create(t, p, manage.SandboxConfig{})
	c := connectTo(t, p, a.ID)
	// A long-lived process in the sandbox, and a shell that looks for the
	// socket among its own descriptors.
	shOK(t, c, "sleep 600 >/dev/null 2>&1 &")
	ino := listeningInode(t, socketPath(p.dir(a.ID)))
	roots, all := sandboxPids(t, p, a.ID)
	holders := 0
	for _, pid := range all {
		links, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, l := range links {
			if target, _ := os.Readlink(l); target != "socket:["+ino+"]" {
				continue
			}
			argv0 := strings.SplitN(cmdline(pid), " ", 2)[0]
			switch {
			case argv0 == insideEnvd:
				holders++
			case containsPid(roots, pid):
				// The outer bwrap, on the host side of the namespaces.
			default:
				t.Errorf("process %d (%s) in the sandbox holds envd's listening socket", pid, cmdline(pid))
			}
		}
	}
	if holders != 1 {
		t.Errorf("envd holds the listening socket %s in %d descriptors; want 1", ino, holders)
	}
}

func containsPid(pids []int, pid int) bool {
	for _, p := range pids {
		if p == pid {
			return true
		}
	}
	return false
}

// listeningInode returns the socket inode of the listening unix socket
// bound at path, from the host's /proc/net/unix.
func listeningInode(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path
		fields := strings.Fields(sc.Text())
		if len(fields) == 8 && fields[7] == path && fields[3] == "00010000" {
			return fields[6]
		}
	}
	t.Fatalf("no listening socket at %s in /proc/net/unix", path)
	return ""
}

// The sandbox cannot reach the socket's path, but were anything on it
// replaced by something a sandbox could have made (a symlink into the
// sandbox's run directory, a symlink as the socket, a directory others may
// write, one that belongs to the sandbox's user), the client refuses to
// connect rather than follow it: the call fails as not sent, and neither
// the other sandbox nor the host socket is reached.
func TestSocketPathCheckRefusesRedirects(t *testing.T) {
	p := needBwrap(t, Config{})
	a := create(t, p, manage.SandboxConfig{})
	b := create(t, p, manage.SandboxConfig{})
	ca := connectTo(t, p, a.ID)
	fake, fakeLn := fakeSocket(t)
	dir := p.dir(a.ID)
	ctl, sock := filepath.Join(dir, controlDir), socketPath(dir)
	run := filepath.Join(dir, "run")
	// What the sandbox prepares in the directory it writes.
	shOK(t, ca, fmt.Sprintf("ln -s %s %s/envd.sock && ln -s %s %s/fake.sock", socketPath(p.dir(b.ID)), insideRun, fake, insideRun))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	hostUID := p.Capabilities().SandboxUID
	for _, tc := range []struct {
		name              string
		redirect, restore func()
		skip              bool
		wantInMessage     string
	}{{
		name:          "control directory replaced by a symlink to the sandbox's run directory",
		redirect:      func() { must(os.Rename(ctl, ctl+".away")); must(os.Symlink(run, ctl)) },
		restore:       func() { must(os.Remove(ctl)); must(os.Rename(ctl+".away", ctl)) },
		wantInMessage: "symlink",
	}, {
		name:          "socket replaced by a symlink to the host socket",
		redirect:      func() { must(os.Rename(sock, sock+".away")); must(os.Symlink(fake, sock)) },
		restore:       func() { must(os.Remove(sock)); must(os.Rename(sock+".away", sock)) },
		wantInMessage: "symlink",
	}, {
		name:          "socket replaced by a symlink to the other sandbox's socket",
		redirect:      func() { must(os.Rename(sock, sock+".away")); must(os.Symlink(socketPath(p.dir(b.ID)), sock)) },
		restore:       func() { must(os.Remove(sock)); must(os.Rename(sock+".away", sock)) },
		wantInMessage: "symlink",
	}, {
		name:          "sandbox directory writable by others",
		redirect:      func() { must(os.Chmod(dir, 0o777)) },
		restore:       func() { must(os.Chmod(dir, 0o711)) },
		wantInMessage: "writable",
	}, {
		name:          "control directory of the sandbox's user",
		skip:          hostUID == os.Geteuid(),
		redirect:      func() { must(os.Lchown(ctl, hostUID, -1)) },
		restore:       func() { must(os.Lchown(ctl, os.Geteuid(), -1)) },
		wantInMessage: "belongs to uid",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip {
				t.Skip("the sandbox's host user is the server's (not a missing part: nothing to tell apart)")
			}
			tc.redirect()
			defer tc.restore()
			fresh := connectTo(t, p, a.ID)
			_, err := fresh.Run(testCtx(t), envdclient.Command{Cmd: "cat", Args: []string{"/proc/sys/kernel/hostname"}}, envdclient.RunOptions{})
			if err == nil || !envdclient.IsNotSent(err) || !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Fatalf("call through a redirected path = %v; want it refused before sending, saying %q", err, tc.wantInMessage)
			}
			if envdtest.Connected(t, fakeLn) {
				t.Error("the host socket was connected to")
			}
		})
	}
	// Mended, A works again.
	fresh := connectTo(t, p, a.ID)
	if got := whoami(t, fresh); got != a.ID {
		t.Errorf("A after the checks is %q", got)
	}
	// Only sandbox sockets of this state directory are dialed at all.
	for _, path := range []string{fake, filepath.Join(run, "envd.sock"), filepath.Join(p.sandboxesDir, "..", "sandboxes", a.ID, "run", "envd.sock")} {
		if err := p.checkSocketPath(path); err == nil {
			t.Errorf("checkSocketPath(%s) passed", path)
		}
	}
	if envdtest.Connected(t, fakeLn) {
		t.Error("the host socket was connected to")
	}
}

// A sandbox made by an older version had its socket in run/, which the
// sandbox may have replaced with a symlink before the server stopped. After
// a restart the sandbox resumes with the socket in ctl/; the symlink left in
// run/ is never followed.
func TestRestartMovesTheSocketOutOfReach(t *testing.T) {
	state := newStateDir(t)
	// The older version had no disk images either: run/ is the directory.
	p1 := needBwrap(t, Config{StateDir: state, Disk: -1})
	a := create(t, p1, manage.SandboxConfig{})
	if err := p1.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	dir := p1.dir(a.ID)
	fake, fakeLn := fakeSocket(t)
	// The old layout, after a hostile tenant: no ctl/, run/envd.sock a
	// symlink to a host socket.
	if err := os.RemoveAll(filepath.Join(dir, controlDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fake, filepath.Join(dir, "run", "envd.sock")); err != nil {
		t.Fatal(err)
	}
	p2 := needBwrap(t, Config{StateDir: state, Disk: -1})
	if s, err := p2.Info(testCtx(t), a.ID); err != nil || s.State != manage.StateStopped {
		t.Fatalf("Info after the restart = %+v, %v; want stopped", s, err)
	}
	if err := p2.Resume(testCtx(t), a.ID); err != nil {
		t.Fatal(err)
	}
	if got := whoami(t, connectTo(t, p2, a.ID)); got != a.ID {
		t.Errorf("resumed A is %q", got)
	}
	fi, err := os.Lstat(filepath.Join(dir, controlDir))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("ctl after the resume: %v, %v; want a 0700 directory", fi, err)
	}
	if envdtest.Connected(t, fakeLn) {
		t.Error("the host socket the old layout pointed at was connected to")
	}
}

// The same attack through the Manager, as the tools make it: alice's
// workspace replaces its socket with bob's; her next calls (on a new
// connection) still run in her own sandbox. And the Manager's clients carry
// the provider's path check: were her socket's path redirected to bob's on
// the host, her call fails instead of running in bob's sandbox.
func TestHostileWorkspaceThroughTheManager(t *testing.T) {
	s := newStack(t, newStateDir(t), nil)
	ctx := testCtx(t)
	alice, err := s.m.Acquire(ctx, "http:alice:default", true)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := s.m.Acquire(ctx, "http:bob:default", true)
	if err != nil {
		t.Fatal(err)
	}
	bobSock := socketPath(s.p.dir(bob.Sandbox.ID))
	shOK(t, alice.Client, fmt.Sprintf("cd %s && ln -s %s envd.sock", insideRun, bobSock))
	alice.Client.Close()
	again, err := s.m.Acquire(ctx, "http:alice:default", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := whoami(t, again.Client); got != alice.Sandbox.ID {
		t.Fatalf("alice's call ran in %q; want her sandbox %s (bob's is %s)", got, alice.Sandbox.ID, bob.Sandbox.ID)
	}

	aliceSock := socketPath(s.p.dir(alice.Sandbox.ID))
	if err := os.Rename(aliceSock, aliceSock+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bobSock, aliceSock); err != nil {
		t.Fatal(err)
	}
	again.Client.Close()
	res, err := again.Client.Run(ctx, envdclient.Command{Cmd: "cat", Args: []string{"/proc/sys/kernel/hostname"}}, envdclient.RunOptions{})
	if err == nil {
		t.Fatalf("alice's call through a redirected socket ran, in %q", strings.TrimSpace(string(res.Stdout.Bytes())))
	}
	if !envdclient.IsNotSent(err) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("alice's call through a redirected socket = %v; want it refused before sending", err)
	}
	if got := whoami(t, bob.Client); got != bob.Sandbox.ID {
		t.Errorf("bob's sandbox says %q", got)
	}
}

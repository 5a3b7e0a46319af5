//go:build linux

package docker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/docker/docker/api/types/container"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker/dockertest"
)

// Create, then commands through envd; the container carries the labels and
// the limits asked for.
func TestCreateRun(t *testing.T) {
	p := newProvider(t, nil)
	t.Logf("engine API version negotiated: %s", p.APIVersion())
	sb, c := create(t, p, manage.SandboxConfig{Key: "stdio:k1", Named: true, Env: map[string]string{"FOO": "bar"}})
	if sb.State != manage.StateRunning || sb.Provider != Name || sb.Workdir != "/workspace" || !validID(sb.ID) {
		t.Fatalf("created %+v", sb)
	}
	if res := run(t, c, "true"); res.ExitCode != 0 {
		t.Fatalf("true: %+v", res)
	}
	if res := run(t, c, "echo hi"); res.ExitCode != 0 || stdout(res) != "hi\n" {
		t.Fatalf("echo hi: exit %d, stdout %q", res.ExitCode, stdout(res))
	}
	if res := run(t, c, `echo "$FOO $(pwd)"`); stdout(res) != "bar /workspace\n" {
		t.Fatalf("env and cwd: %q", stdout(res))
	}
	ci, err := dockertest.Engine(t).ContainerInspect(t.Context(), containerName(sb.ID))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		LabelProvider: Name, LabelID: sb.ID, LabelOwner: p.Owner(), LabelKey: "stdio:k1", LabelNamed: "true",
	} {
		if got := ci.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if ci.HostConfig.NetworkMode != "none" {
		t.Errorf("network mode %q, want none", ci.HostConfig.NetworkMode)
	}
	if ci.HostConfig.PidsLimit == nil || *ci.HostConfig.PidsLimit != DefaultPids {
		t.Errorf("pids limit %v, want %d", ci.HostConfig.PidsLimit, DefaultPids)
	}
	info, err := p.Info(t.Context(), sb.ID)
	if err != nil || info.State != manage.StateRunning || info.CreatedAt.IsZero() {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	list, err := p.List(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != sb.ID || list[0].State != manage.StateRunning {
		t.Fatalf("List = %+v, %v", list, err)
	}
}

// A process survives pause and resume; Info follows.
func TestPauseResume(t *testing.T) {
	p := newProvider(t, nil)
	sb, c := create(t, p, manage.SandboxConfig{Key: "k"})
	ctx := t.Context()
	h, err := c.Start(ctx, envdclient.Command{Cmd: "sleep", Args: []string{"300"}}, envdclient.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Disconnect()
	if err := p.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(ctx, sb.ID); err != nil {
		t.Fatalf("pausing a paused sandbox: %v", err)
	}
	if info, err := p.Info(ctx, sb.ID); err != nil || info.State != manage.StatePaused {
		t.Fatalf("Info after Pause = %+v, %v", info, err)
	}
	if err := p.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(ctx, sb.ID); err != nil {
		t.Fatalf("resuming a running sandbox: %v", err)
	}
	if info, err := p.Info(ctx, sb.ID); err != nil || info.State != manage.StateRunning {
		t.Fatalf("Info after Resume = %+v, %v", info, err)
	}
	if res := run(t, c, fmt.Sprintf("kill -0 %d", h.Pid())); res.ExitCode != 0 {
		t.Fatalf("the process started before the pause is gone: %+v", res)
	}
}

// A stopped container is stopped (its files kept); Resume starts it again
// with its files, and the server reaches the new envd through the same
// endpoint.
func TestStopResume(t *testing.T) {
	p := newProvider(t, nil)
	sb, c := create(t, p, manage.SandboxConfig{Key: "k"})
	ctx := t.Context()
	if res := run(t, c, "echo kept > f"); res.ExitCode != 0 {
		t.Fatal(res)
	}
	ep1, err := p.Endpoint(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := dockertest.Engine(t).ContainerStop(ctx, containerName(sb.ID), container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := p.Info(ctx, sb.ID)
	if err != nil || info.State != manage.StateStopped || info.EndedAt.IsZero() {
		t.Fatalf("Info after docker stop = %+v, %v", info, err)
	}
	if err := p.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	ep2, err := p.Endpoint(ctx, sb.ID)
	if err != nil || ep2.URL != ep1.URL {
		t.Fatalf("endpoint after restart %+v, %v; want %s", ep2, err, ep1.URL)
	}
	// The client made before the stop dials the same path again.
	if res := run(t, c, "cat f"); stdout(res) != "kept\n" {
		t.Fatalf("file after restart: %q", stdout(res))
	}
}

// `docker rm -f` behind the provider's back: Info says gone, Kill is a
// no-op, Pause and Resume say not found.
func TestRemovedBehindOurBack(t *testing.T) {
	p := newProvider(t, nil)
	sb, _ := create(t, p, manage.SandboxConfig{Key: "k"})
	ctx := t.Context()
	if err := dockertest.Engine(t).ContainerRemove(ctx, containerName(sb.ID), container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	info, err := p.Info(ctx, sb.ID)
	if err != nil || info.State != manage.StateGone {
		t.Fatalf("Info after docker rm -f = %+v, %v", info, err)
	}
	if err := p.Resume(ctx, sb.ID); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("Resume of a removed sandbox: %v", err)
	}
	if err := p.Kill(ctx, sb.ID); err != nil {
		t.Fatalf("Kill of a removed sandbox: %v", err)
	}
	if _, err := os.Stat(p.sandboxDir(sb.ID)); !os.IsNotExist(err) {
		t.Fatalf("the sandbox directory is still there after Kill: %v", err)
	}
	if info, err := p.Info(ctx, "dffffffffffffff0"); err != nil || info.State != manage.StateGone {
		t.Fatalf("Info of an unknown id = %+v, %v", info, err)
	}
}

// Kill removes the container, paused or not, and its host directory.
func TestKill(t *testing.T) {
	p := newProvider(t, nil)
	sb, _ := create(t, p, manage.SandboxConfig{Key: "k"})
	ctx := t.Context()
	if err := p.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := dockertest.Engine(t).ContainerInspect(ctx, containerName(sb.ID)); err == nil {
		t.Fatal("the container is still there after Kill")
	}
	if info, err := p.Info(ctx, sb.ID); err != nil || info.State != manage.StateGone {
		t.Fatalf("Info after Kill = %+v, %v", info, err)
	}
	if list, err := p.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("List after Kill = %+v, %v", list, err)
	}
}

// Without network the container has only the loopback interface, and
// nothing outside answers; with it, it has more.
func TestNetworkOffByDefault(t *testing.T) {
	p := newProvider(t, nil)
	_, c := create(t, p, manage.SandboxConfig{Key: "k"})
	res := run(t, c, "ls /sys/class/net")
	if got := strings.Fields(stdout(res)); len(got) != 1 || got[0] != "lo" {
		t.Fatalf("interfaces without network: %q", got)
	}
	// A listener on the host's loopback is not the sandbox's loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if res := run(t, c, fmt.Sprintf("nc -w 2 127.0.0.1 %d </dev/null", port)); res.ExitCode == 0 {
		t.Fatalf("the sandbox reached the host's 127.0.0.1:%d", port)
	}
	if res := run(t, c, "ip route 2>&1"); strings.TrimSpace(stdout(res)) != "" {
		t.Fatalf("routes without network: %q", stdout(res))
	}
	_, c2 := create(t, p, manage.SandboxConfig{Key: "k2", Network: manage.NetworkPolicyOn()})
	if got := strings.Fields(stdout(run(t, c2, "ls /sys/class/net"))); len(got) < 2 {
		t.Fatalf("interfaces with network: %q", got)
	}
}

// A fork bomb hits the pids limit; the sandbox survives it. The script
// uses only shell builtins once the limit is reached (echo, read, kill),
// kills what it started and waits until each is reaped.
func TestPidsLimit(t *testing.T) {
	p := newProvider(t, nil)
	_, c := create(t, p, manage.SandboxConfig{Key: "k", Limits: manage.Limits{Pids: 64}})
	res := run(t, c, `( while :; do sleep 1000 & echo $! >> /tmp/pids; done ) 2>/dev/null
n=0; while read p; do kill $p; n=$((n+1)); done < /tmp/pids
while read p; do while kill -0 $p 2>/dev/null; do :; done; done < /tmp/pids
echo "started $n"`)
	var n int
	if _, err := fmt.Sscanf(stdout(res), "started %d", &n); err != nil || n == 0 || n >= 64 {
		t.Fatalf("fork loop under a limit of 64: %q (exit %d, %s)", stdout(res), res.ExitCode, res.Stderr.Bytes())
	}
	t.Logf("the limit of 64 let %d sleepers start", n)
	if res := run(t, c, "echo alive"); stdout(res) != "alive\n" {
		t.Fatalf("after the fork bomb: %+v", res)
	}
}

// A process that allocates past the memory limit is killed, and the
// sandbox survives (best effort: the kernel picks the victim, the biggest).
func TestMemoryLimit(t *testing.T) {
	p := newProvider(t, nil)
	_, c := create(t, p, manage.SandboxConfig{Key: "k", Limits: manage.Limits{MemoryBytes: 64 << 20}})
	// 256 MiB into a shell variable through head: far past 64 MiB.
	res := run(t, c, `x=$(head -c 268435456 /dev/zero | tr '\0' a); echo ${#x}`)
	if res.ExitCode == 0 && strings.TrimSpace(stdout(res)) == "268435456" {
		t.Fatalf("allocated 256 MiB under a 64 MiB limit: %+v", res)
	}
	t.Logf("allocation past the limit: exit %d, signal %q, status %q", res.ExitCode, res.Signal, res.Status)
	if res := run(t, c, "echo alive"); stdout(res) != "alive\n" {
		t.Fatalf("after the memory kill: %+v", res)
	}
}

// An image the engine does not have: a clear error naming it, at once (no
// pull).
func TestMissingImage(t *testing.T) {
	p := newProvider(t, nil)
	const img = "sandbox-mcp-test/no-such-image:nope"
	_, err := p.Create(t.Context(), manage.SandboxConfig{Key: "k", Template: img})
	if err == nil || !strings.Contains(err.Error(), img) || !strings.Contains(err.Error(), "never pulls") {
		t.Fatalf("Create with a missing image: %v", err)
	}
	if list, _ := p.List(t.Context()); len(list) != 0 {
		t.Fatalf("a container was left behind: %+v", list)
	}
}

// A sandbox that replaces its socket with a symbolic link to a socket on
// the host does not redirect the server: the link the server dials still
// leads to envd, and a fresh link to the symlink is refused.
func TestHostileSocketSymlink(t *testing.T) {
	p := newProvider(t, nil)
	sb, c := create(t, p, manage.SandboxConfig{Key: "k"})
	ctx := t.Context()
	// A decoy on the host, which must never be dialled.
	decoyDir := t.TempDir()
	decoy := filepath.Join(decoyDir, "decoy.sock")
	ln, err := net.Listen("unix", decoy)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialled := make(chan struct{}, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			dialled <- struct{}{}
			conn.Close()
		}
	}()
	res := run(t, c, "rm "+insideSocket+" && ln -s "+decoy+" "+insideSocket+" && ls -l "+insideRun)
	if res.ExitCode != 0 {
		t.Fatalf("replacing the socket: %+v", res)
	}
	// The server's endpoint keeps its link to envd's socket.
	ep, err := p.Endpoint(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := envdclient.New(ep.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if res := run(t, c2, "echo still envd"); stdout(res) != "still envd\n" {
		t.Fatalf("through the endpoint after the swap: %+v", res)
	}
	// Without that link, the symlink is refused rather than followed.
	if err := os.Remove(socketPath(p.dir, sb.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Endpoint(ctx, sb.ID); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Endpoint with the socket replaced by a symlink: %v", err)
	}
	if err := refreshLink(p.sandboxDir(sb.ID)); !errors.Is(err, errNotSocket) {
		t.Fatalf("refreshLink: %v", err)
	}
	select {
	case <-dialled:
		t.Fatal("the server dialled the decoy socket the sandbox pointed at")
	default:
	}
}

// refreshLink on host directories only: a symlink, a regular file and a
// missing file are refused, a socket is linked, and a new socket replaces
// the link.
func TestRefreshLink(t *testing.T) {
	dir, err := os.MkdirTemp("", "dl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := makeRunDir(dir); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, runDir, socketName)
	if err := refreshLink(dir); err == nil {
		t.Fatal("refreshLink without a socket succeeded")
	}
	target := filepath.Join(dir, "elsewhere.sock")
	other, err := net.Listen("unix", target)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := os.Symlink(target, src); err != nil {
		t.Fatal(err)
	}
	if err := refreshLink(dir); !errors.Is(err, errNotSocket) {
		t.Fatalf("refreshLink of a symlink to a socket: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, socketName)); !os.IsNotExist(err) {
		t.Fatalf("a link was left for the symlink: %v", err)
	}
	_ = os.Remove(src)
	if err := os.WriteFile(src, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := refreshLink(dir); !errors.Is(err, errNotSocket) {
		t.Fatalf("refreshLink of a regular file: %v", err)
	}
	_ = os.Remove(src)
	for i := range 2 {
		ln, err := net.Listen("unix", src)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		if err := refreshLink(dir); err != nil {
			t.Fatal(err)
		}
		conn, err := net.Dial("unix", filepath.Join(dir, socketName))
		if err != nil {
			t.Fatalf("dial the link (%d): %v", i, err)
		}
		conn.Close()
		ln.Close()
		_ = os.Remove(src)
	}
}

// The envd binary must be static.
func TestCheckStatic(t *testing.T) {
	if err := checkStatic([]byte("#!/bin/sh\n"), runtime.GOARCH); err == nil {
		t.Fatal("a script passed as an ELF executable")
	}
	data, err := os.ReadFile("/bin/sh")
	if err == nil {
		if err := checkStatic(data, runtime.GOARCH); !errors.Is(err, errNotStatic) {
			t.Errorf("/bin/sh (dynamic): %v", err)
		}
	}
	if _, err := installEnvd(t.TempDir(), "/bin/sh", runtime.GOARCH); err == nil {
		t.Error("installEnvd took a dynamic binary")
	}
}

// mapState covers the states the engine reports.
func TestMapState(t *testing.T) {
	for _, tc := range []struct {
		st   container.State
		want manage.State
	}{
		{container.State{Status: "running", Running: true}, manage.StateRunning},
		{container.State{Status: "paused", Running: true, Paused: true}, manage.StatePaused},
		{container.State{Status: "exited", ExitCode: 137}, manage.StateStopped},
		{container.State{Status: "created"}, manage.StateStopped},
		{container.State{Status: "dead", Dead: true}, manage.StateGone},
		{container.State{Status: "removing"}, manage.StateGone},
	} {
		if got, detail := mapState(&tc.st); got != tc.want {
			t.Errorf("%s: %s (%s), want %s", tc.st.Status, got, detail, tc.want)
		}
	}
	st := container.State{Status: "exited", ExitCode: 137, OOMKilled: true}
	if _, detail := mapState(&st); !strings.Contains(detail, "out of memory") || !strings.Contains(detail, strconv.Itoa(137)) {
		t.Errorf("OOM detail %q", detail)
	}
}

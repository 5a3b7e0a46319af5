//go:build linux

package envdclient_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

func TestDeadlineKillsProcessGroup(t *testing.T) {
	d := envdtest.Serve(t, "unix", daemon.Config{})
	c := newClient(t, d.Endpoint)
	pidFile := filepath.Join(d.Root, "grandchild.pid")
	cmd := sh(`sleep 300 & echo $! > ` + pidFile + `; wait`)
	cmd.Timeout = 500 * time.Millisecond
	res, err := c.Run(t.Context(), cmd, envdclient.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Exited || res.ExitCode != 137 {
		t.Fatalf("result = %+v; want timed out, killed", res)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	// The group was SIGKILLed before the end event was sent; the kernel
	// finishes the grandchild off right after (a zombie counts as gone).
	if pid == 0 || !exitsSoon(t, pid) {
		t.Fatalf("grandchild %d survived the deadline", pid)
	}
}

func TestCancelKillsProcess(t *testing.T) {
	d := envdtest.Serve(t, "unix", daemon.Config{})
	c := newClient(t, d.Endpoint)
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan uint32, 1)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Run(ctx, sh("sleep 300"), envdclient.RunOptions{OnStart: func(pid uint32) { started <- pid }})
		errc <- err
	}()
	pid := <-started
	cancel()
	err := <-errc
	if connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("Run after cancel = %v; want canceled", err)
	}
	if envdclient.IsPossibleLoss(err) {
		t.Errorf("a caller's cancellation must not look like a sandbox loss: %v", err)
	}
	// Run returns once the kill was acknowledged; the kernel ends the process
	// right after. Its end event (envd keeps it for late attachers) says how.
	res := waitEnd(t, c, envdclient.ByPid(pid))
	if res != nil && (res.Exited || res.Signal != "killed") {
		t.Fatalf("process %d after cancel: %+v; want killed", pid, res)
	}
	if pidAlive(int(pid)) {
		t.Fatalf("process %d still alive after its end event", pid)
	}
}

func TestCancelBeforePidKillsByTag(t *testing.T) {
	d := envdtest.Serve(t, "unix", daemon.Config{})
	c := newClient(t, d.Endpoint, envdclient.WithKillTimeout(30*time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // abandoned before anything came back
	cmd := sh("sleep 300")
	cmd.Tag = "early-cancel"
	if _, err := c.Run(ctx, cmd, envdclient.RunOptions{}); connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("Run = %v; want canceled", err)
	}
	// Killed by tag (or by pid once its start event arrived): its end says so.
	if res := waitEnd(t, c, envdclient.ByTag("early-cancel")); res != nil && (res.Exited || res.Signal != "killed") {
		t.Fatalf("process tagged early-cancel after cancel: %+v; want killed", res)
	}
	procs, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Tag == "early-cancel" {
			t.Fatalf("process %d tagged early-cancel still running", p.Pid)
		}
	}
}

// A Run or Start whose caller gives up after envd spawned the process but
// before its start event arrived kills it: by tag, then by the late pid.
// Before the answer's headers, the call itself must heed the caller.
func TestCancelledBeforeStartEventKills(t *testing.T) {
	calls := map[string]func(c *envdclient.Client, ctx context.Context, cmd envdclient.Command) error{
		"Run": func(c *envdclient.Client, ctx context.Context, cmd envdclient.Command) error {
			res, err := c.Run(ctx, cmd, envdclient.RunOptions{})
			if err == nil {
				err = fmt.Errorf("Run returned %+v", res)
			}
			return err
		},
		"Start": func(c *envdclient.Client, ctx context.Context, cmd envdclient.Command) error {
			h, err := c.Start(ctx, cmd, envdclient.StartOptions{})
			if err == nil {
				_ = h.Kill(context.Background())
				err = errors.New("Start returned a handle")
			}
			return err
		},
	}
	for name, call := range calls {
		for _, headersFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/headersFirst=%v", name, headersFirst), func(t *testing.T) {
				g := serveGated(t, false, headersFirst)
				c := newClient(t, g.endpoint, envdclient.WithKillTimeout(30*time.Second))
				ctx, cancel := context.WithCancel(t.Context())
				cmd := sh("exec sleep 300")
				cmd.Tag = "mid-cancel"
				errc := make(chan error, 1)
				go func() { errc <- call(c, ctx, cmd) }()
				within(t, g.spawned, "process spawned")
				cancel()
				// The abandoned call kills by tag while the start event is
				// still held.
				within(t, g.signalled, "kill after the cancelled call")
				close(g.open)
				select {
				case err := <-errc:
					if connect.CodeOf(err) != connect.CodeCanceled {
						t.Fatalf("call after cancel = %v; want canceled", err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("the cancelled call did not return")
				}
				assertNoProcessTagged(t, c, cmd.Tag)
			})
		}
	}
}

// A Watch whose caller gives up before envd answered returns at once.
func TestWatchCancelledBeforeStartEvent(t *testing.T) {
	g := serveGated(t, false, false)
	c := newClient(t, g.endpoint)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		w, err := c.Watch(ctx, "", envdclient.WatchOptions{})
		if err == nil {
			w.Close()
			err = errors.New("Watch returned a watcher")
		}
		errc <- err
	}()
	within(t, g.spawned, "watch started")
	cancel()
	select {
	case err := <-errc:
		if connect.CodeOf(err) != connect.CodeCanceled {
			t.Fatalf("Watch after cancel = %v; want canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled Watch did not return")
	}
	close(g.open)
}

// Starts whose context ended before they were called leave no process
// behind, whether or not envd spawned it.
func TestStartAlreadyCancelledKills(t *testing.T) {
	g := serveGated(t, true, false)
	c := newClient(t, g.endpoint, envdclient.WithKillTimeout(30*time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for i := range 10 {
		cmd := sh("exec sleep 300")
		cmd.Tag = fmt.Sprintf("start-cancelled-%d", i)
		if h, err := c.Start(ctx, cmd, envdclient.StartOptions{}); connect.CodeOf(err) != connect.CodeCanceled {
			if err == nil {
				_ = h.Kill(t.Context())
			}
			t.Fatalf("Start with a cancelled context = %v; want canceled", err)
		}
		// Once envd is done with the request, its process (if it spawned
		// one) is in its table.
		within(t, g.started, "end of the Start call in envd")
		assertNoProcessTagged(t, c, cmd.Tag)
	}
}

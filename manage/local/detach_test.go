//go:build linux

package local

import (
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// A named workspace's sandbox outlives the Provider that started it: after
// that Provider closes, another finds it running with its processes, can
// pause and resume it, and its Kill ends every process of it.
func TestDetachedDaemonOutlivesProvider(t *testing.T) {
	for _, isolation := range []string{IsolationBwrap, IsolationNone} {
		t.Run(isolation, func(t *testing.T) {
			stateDir := newStateDir(t)
			var a, b *Provider
			if isolation == IsolationBwrap {
				a, b = needBwrap(t, Config{StateDir: stateDir}), needBwrap(t, Config{StateDir: stateDir})
			} else {
				a, b = newProvider(t, Config{StateDir: stateDir, Isolation: isolation}), newProvider(t, Config{StateDir: stateDir, Isolation: isolation})
			}
			sa := create(t, a, manage.SandboxConfig{Key: "stdio:shared", Named: true})
			shOK(t, connectTo(t, a, sa.ID), "echo kept > f; (sleep 300 >/dev/null 2>&1 &)")
			_, all := sandboxPids(t, a, sa.ID)
			procs := snapshot(all)
			if err := a.Close(testCtx(t)); err != nil {
				t.Fatalf("A.Close: %v", err)
			}
			for _, sp := range procs {
				if procStart(sp.pid) != sp.start {
					t.Fatalf("process %d of the sandbox ended when the Provider that started it closed", sp.pid)
				}
			}
			if info, err := b.Info(testCtx(t), sa.ID); err != nil || info.State != manage.StateRunning {
				t.Fatalf("B.Info after A closed = %+v, %v; want running", info, err)
			}
			c := connectTo(t, b, sa.ID)
			if got := shOK(t, c, "cat f; pgrep -x sleep >/dev/null && echo sleeping"); got != "kept\nsleeping" {
				t.Fatalf("through B after A closed: %q", got)
			}
			if err := b.Pause(testCtx(t), sa.ID); err != nil {
				t.Fatalf("B.Pause: %v", err)
			}
			if info, err := b.Info(testCtx(t), sa.ID); err != nil || info.State != manage.StatePaused {
				t.Fatalf("B.Info after B paused = %+v, %v; want paused", info, err)
			}
			if err := b.Resume(testCtx(t), sa.ID); err != nil {
				t.Fatalf("B.Resume: %v", err)
			}
			shOK(t, c, "pgrep -x sleep >/dev/null")
			if err := b.Kill(testCtx(t), sa.ID); err != nil {
				t.Fatalf("B.Kill: %v", err)
			}
			checkEnded(t, procs)
			if info, err := b.Info(testCtx(t), sa.ID); err != nil || info.State != manage.StateGone {
				t.Fatalf("B.Info after Kill = %+v, %v; want gone", info, err)
			}
		})
	}
}

//go:build linux

package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

func TestConcurrentUse(t *testing.T) {
	p := needBwrap(t, Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testCtx(t)
			sb, err := p.Create(ctx, manage.SandboxConfig{})
			if err != nil {
				errs <- err
				return
			}
			ep, err := p.Endpoint(ctx, sb.ID)
			if err != nil {
				errs <- err
				return
			}
			c, err := envdclient.New(ep.URL)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			res, err := c.Run(ctx, envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", fmt.Sprintf("echo %d > /workspace/n; cat /workspace/n", i)}}, envdclient.RunOptions{})
			if err != nil || strings.TrimSpace(string(res.Stdout.Bytes())) != fmt.Sprint(i) {
				errs <- fmt.Errorf("sandbox %d: %+v, %v", i, res, err)
				return
			}
			if _, err := p.List(ctx); err != nil {
				errs <- err
			}
			if err := p.Pause(ctx, sb.ID); err != nil {
				errs <- err
			}
			if err := p.Resume(ctx, sb.ID); err != nil {
				errs <- err
			}
			if err := p.Kill(ctx, sb.ID); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if list, err := p.List(testCtx(t)); err != nil || len(list) != 0 {
		t.Errorf("List after killing all = %+v, %v", list, err)
	}
}

// TestCloseDuringCreate closes the provider while a Create waits for its
// daemon to get ready. Close cannot see that daemon: Create must stop it
// itself and fail, leaving nothing running and no directory behind.
func TestCloseDuringCreate(t *testing.T) {
	needBinary(t)
	dir, err := os.MkdirTemp(testRoot, "slowenvd")
	if err != nil {
		t.Fatal(err)
	}
	// The daemon waits at a fifo before it becomes envd.
	gate := filepath.Join(dir, "gate")
	if err := unix.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	slow := filepath.Join(dir, "sandbox-mcp")
	script := fmt.Sprintf("#!/bin/sh\nread go < %s\nexec %s \"$@\"\n", gate, envdBinary)
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, Config{Isolation: IsolationNone, EnvdBinary: slow})

	type result struct {
		sb  manage.Sandbox
		err error
	}
	created := make(chan result, 1)
	go func() {
		sb, err := p.Create(testCtx(t), manage.SandboxConfig{})
		created <- result{sb, err}
	}()
	// Opening the fifo for writing returns once the daemon opened it to
	// read: Create is then waiting for it to get ready.
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
		}
		opened <- f
	}()
	var w *os.File
	select {
	case w = <-opened:
	case r := <-created:
		t.Fatalf("Create returned before its daemon started: %+v, %v", r.sb, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon never opened the fifo")
	}
	if w == nil {
		t.FailNow()
	}
	entries, err := os.ReadDir(p.sandboxesDir)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, de := range entries {
		if validID(de.Name()) {
			id = de.Name()
		}
	}
	_, all := sandboxPids(t, p, id)
	if id == "" || len(all) == 0 {
		t.Fatalf("no sandbox directory or no daemon process while Create waits: %v, %v", entries, all)
	}
	procs := snapshot(all)

	if err := p.Close(testCtx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := w.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	var r result
	select {
	case r = <-created:
	case <-time.After(30 * time.Second):
		t.Fatal("Create did not return")
	}
	if connect.CodeOf(r.err) != connect.CodeFailedPrecondition {
		t.Errorf("Create across Close = %+v, %v; want FailedPrecondition", r.sb, r.err)
	}
	checkEnded(t, procs)
	if roots, _ := sandboxPids(t, p, id); len(roots) != 0 {
		t.Errorf("processes of the sandbox run after Create failed: %v", roots)
	}
	if _, err := os.Stat(p.dir(id)); !os.IsNotExist(err) {
		t.Errorf("the sandbox directory after the failed Create: %v", err)
	}
}

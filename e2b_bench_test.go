//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

// BenchmarkE2BOverManageServe measures the e2b provider over a `manage
// serve` process (its API, then its envd proxy, then a local sandbox) next
// to the local provider directly, in one run (p50 is the median):
//
//	go test -run '^$' -bench E2BOverManageServe -benchtime 20x .
//
// manager/…: the Manager as serve runs it, in this process: create (the
// first Acquire of a workspace), pause (Manager.Pause), resume (the Acquire
// after a pause) and exec-true (`true` through the lease's envd client).
// serve/…: the built binaries, an MCP client over stdio: workspace_exec of
// `true`, and workspace_reset (kill and create: no tool only creates).
func BenchmarkE2BOverManageServe(b *testing.B) {
	testenv.RequireRoot(b)
	api := startManageServe(b, manageServeConfig{})
	managers := []struct {
		name string
		p    manage.Provider
	}{
		{"local", newBenchLocalProvider(b)},
		{"e2b", newE2BProvider(b, api)},
	}
	for _, mp := range managers {
		m := newE2BManager(b, mp.p, nil)
		b.Run("manager/create/"+mp.name, func(b *testing.B) { benchManagerCreate(b, m) })
		b.Run("manager/pause/"+mp.name, func(b *testing.B) { benchManagerPauseResume(b, m, true) })
		b.Run("manager/resume/"+mp.name, func(b *testing.B) { benchManagerPauseResume(b, m, false) })
		b.Run("manager/exec-true/"+mp.name, func(b *testing.B) { benchManagerTrue(b, m) })
	}
	servers := []struct {
		name  string
		flags []string
	}{
		{"local", []string{"--provider", "local"}},
		{"e2b", api.ServeFlags()},
	}
	for _, sv := range servers {
		b.Run("serve/exec-true/"+sv.name, func(b *testing.B) {
			s := &stdioSession{c: stdioClient(b, sv.flags...)}
			s.call(b, "workspace_exec", map[string]any{"argv": []any{"true"}})
			benchCalls(b, func() { s.call(b, "workspace_exec", map[string]any{"argv": []any{"true"}}) })
		})
		b.Run("serve/reset/"+sv.name, func(b *testing.B) {
			s := &stdioSession{c: stdioClient(b, sv.flags...)}
			s.call(b, "workspace_exec", map[string]any{"argv": []any{"true"}})
			benchCalls(b, func() { s.call(b, "workspace_reset", map[string]any{"confirm": true}) })
		})
	}
}

// newBenchLocalProvider is a local provider with bubblewrap sandboxes, as
// manage serve runs them, closed when the benchmark ends.
func newBenchLocalProvider(b *testing.B) *local.Provider {
	b.Helper()
	dir := envdtest.ShortTempDir(b)
	if err := os.Chmod(dir, 0o711); err != nil {
		b.Fatal(err)
	}
	p, err := local.New(context.Background(), local.Config{StateDir: dir, Isolation: "bwrap", Logger: quietLog})
	if err != nil {
		testenv.Missing(b, "bubblewrap sandboxes do not work here: %v", err)
	}
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// benchCalls times op b.N times and reports the median and p99.
func benchCalls(b *testing.B, op func()) {
	b.Helper()
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		op()
		ds = append(ds, time.Since(t0))
	}
	envdtest.ReportPercentiles(b, ds)
}

// benchManagerCreate times the first Acquire of a new workspace; the
// sandbox is killed (EndSession of an anonymous workspace) untimed.
func benchManagerCreate(b *testing.B, m *manage.Manager) {
	ctx := context.Background()
	ds := make([]time.Duration, 0, b.N)
	for i := 0; b.Loop(); i++ {
		key := fmt.Sprintf("create-%d", i)
		t0 := time.Now()
		l, err := m.Acquire(ctx, key, false)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		l.Release()
		if err := m.EndSession(ctx, key); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	envdtest.ReportPercentiles(b, ds)
}

// benchManagerPauseResume times Manager.Pause (pause) or the Acquire that
// resumes the paused sandbox (!pause); the other half runs untimed.
func benchManagerPauseResume(b *testing.B, m *manage.Manager, pause bool) {
	ctx := context.Background()
	const key = "pause-resume"
	acquire := func() {
		l, err := m.Acquire(ctx, key, true)
		if err != nil {
			b.Fatal(err)
		}
		l.Release()
	}
	pauseNow := func() {
		if err := m.Pause(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
	acquire()
	timed, untimed := pauseNow, acquire
	if !pause {
		timed, untimed = acquire, pauseNow
		pauseNow()
	}
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		timed()
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		untimed()
		b.StartTimer()
	}
	envdtest.ReportPercentiles(b, ds)
}

// benchManagerTrue times running `true` through a lease's envd client.
func benchManagerTrue(b *testing.B, m *manage.Manager) {
	ctx := context.Background()
	l, err := m.Acquire(ctx, "exec-true", true)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release()
	cmd := envdclient.Command{Cmd: "true"}
	benchCalls(b, func() {
		res, err := l.Client.Run(ctx, cmd, envdclient.RunOptions{})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	})
}

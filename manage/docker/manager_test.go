//go:build linux

package docker

// The Manager on docker sandboxes: the lifecycle promises of the manage
// package against a real engine.

import (
	"context"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker/dockertest"
)

// newManager runs a Manager with a docker provider and a bolt store in the
// provider's state directory.
func newManager(t *testing.T) (*Provider, *manage.Manager) {
	t.Helper()
	p := newProvider(t, nil)
	store, err := boltstore.Open(t.TempDir(), boltstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manage.New(manage.Options{Provider: p, Store: store, AutoRecreate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = m.Shutdown(context.Background())
		_ = store.Close()
	})
	return p, m
}

// A command through the Manager; an explicit pause and the next call's
// resume keep a file; a container removed behind the Manager's back is a
// loss, replaced by generation 2; Shutdown kills the anonymous sandbox.
func TestManagerLifecycle(t *testing.T) {
	p, m := newManager(t)
	ctx := t.Context()
	l, err := m.Acquire(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Client.Run(ctx, sh("echo hi > f; cat f"), envdclient.RunOptions{})
	if err = l.Check(ctx, err); err != nil || stdout(res) != "hi\n" {
		t.Fatalf("first call: %+v, %v", res, err)
	}
	id := l.Sandbox.ID
	l.Release()

	if err := m.Pause(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if info, err := p.Info(ctx, id); err != nil || info.State != manage.StatePaused {
		t.Fatalf("after Manager.Pause: %+v, %v", info, err)
	}
	l, err = m.Acquire(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	res, err = l.Client.Run(ctx, sh("cat f"), envdclient.RunOptions{})
	if err = l.Check(ctx, err); err != nil || stdout(res) != "hi\n" || l.Sandbox.ID != id {
		t.Fatalf("call after the pause: %+v, %v (sandbox %s, was %s)", res, err, l.Sandbox.ID, id)
	}
	l.Release()

	if err := dockertest.Engine(t).ContainerRemove(ctx, containerName(id), container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	l, err = m.Acquire(ctx, "k", false)
	if err == nil {
		_, err = l.Client.Run(ctx, sh("true"), envdclient.RunOptions{})
		err = l.Check(ctx, err)
		l.Release()
	}
	le, ok := manage.AsLost(err)
	if !ok || !le.Replaced || le.Generation != 2 {
		t.Fatalf("call after docker rm -f: %v (%+v); want a loss replaced by generation 2", err, le)
	}
	l, err = m.Acquire(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	res, err = l.Client.Run(ctx, sh("echo again; ls f 2>&1"), envdclient.RunOptions{})
	if err = l.Check(ctx, err); err != nil || !strings.HasPrefix(stdout(res), "again\n") || l.Generation != 2 {
		t.Fatalf("call on the replacement: %+v, %v (generation %d)", res, err, l.Generation)
	}
	newID := l.Sandbox.ID
	l.Release()

	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := p.Info(ctx, newID); err != nil || info.State != manage.StateGone {
		t.Fatalf("anonymous sandbox after Shutdown: %+v, %v", info, err)
	}
}

//go:build linux

package docker

// A damaged store file rebuilt from the docker containers: the Manager,
// the bolt store and the reaper on the real engine.

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore/boltstoretest"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker/dockertest"
)

// openStore opens the bolt store in dir, closed when the test ends.
func openStore(t *testing.T, dir string) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(dir, boltstore.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// startManager runs a Manager on p and store, shut down when the test ends.
func startManager(t *testing.T, p *Provider, store manage.Store) *manage.Manager {
	t.Helper()
	m, err := manage.New(manage.Options{Provider: p, Store: store, AutoRecreate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m
}

// acquireWithKeptFile acquires named workspace key on m and writes text
// to /workspace/kept.txt in its sandbox.
func acquireWithKeptFile(t *testing.T, m *manage.Manager, key, text string) *manage.Lease {
	t.Helper()
	ctx := t.Context()
	l, err := m.Acquire(ctx, key, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Client.Run(ctx, sh("echo "+text+" > /workspace/kept.txt"), envdclient.RunOptions{})
	if err = l.Check(ctx, err); err != nil || res.ExitCode != 0 {
		t.Fatalf("writing the file: %+v, %v", res, err)
	}
	return l
}

// A damaged state.db used to make a named docker workspace come back as a
// new empty sandbox, its container orphaned (and, at the next start,
// removed with its volume by the reaper). Now the reaper spares what the
// provider made while the store is damaged, the Manager rebuilds the
// record from the container's labels, and the first call reaches the same
// container, file and process, with the rebuild event; a container
// someone else started with copied labels is never adopted; once rebuilt,
// the record owns the container for the reaper.
func TestDamagedStoreRebuiltFromContainers(t *testing.T) {
	for _, how := range []string{"truncated", "bit-flipped"} {
		t.Run(how, func(t *testing.T) {
			p := newProvider(t, nil)
			cli := dockertest.Engine(t)
			ctx := t.Context()
			dir := t.TempDir()
			store := openStore(t, dir)
			m := startManager(t, p, store)
			const key = "stdio:keep"
			l := acquireWithKeptFile(t, m, key, "still here")
			h, err := l.Client.Start(ctx, envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", "sleep 3600"}, Tag: "keeper"}, envdclient.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pid := h.Pid()
			h.Disconnect()
			id, gen := l.Sandbox.ID, l.Generation
			l.Release()
			if err := m.Shutdown(ctx); err != nil { // pauses the named workspace
				t.Fatal(err)
			}
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			boltstoretest.Damage(t, dir, how)

			// Someone else's container with the sandbox's labels copied,
			// under another name.
			ci, err := cli.ContainerInspect(ctx, containerName(id))
			if err != nil {
				t.Fatal(err)
			}
			img := dockertest.BusyboxImage(t, cli)
			copied := stranger(t, cli, p, img, "sandbox-mcp-test-copied-"+id, id)
			if c, err := cli.ContainerInspect(ctx, copied); err != nil || c.Config.Labels[LabelKey] != "stolen" {
				t.Fatalf("the stranger: %+v, %v", c.Config, err)
			}
			labels := ci.Config.Labels
			if labels[LabelKey] != key || labels[LabelNamed] != "true" || labels[LabelGeneration] != strconv.FormatInt(gen, 10) {
				t.Fatalf("the sandbox's labels %v; want its key, named and generation %d", labels, gen)
			}
			lookalike := strangerWithLabels(t, cli, img, "sandbox-mcp-test-lookalike-"+id, labels)

			// The next server: the store finds its file damaged at open.
			store = openStore(t, dir)
			if store.Damages() != 1 {
				t.Fatalf("Damages after opening the damaged file: %d", store.Damages())
			}
			found, err := p.Rediscover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(found) != 1 || found[0].Sandbox.ID != id || found[0].Key != key || !found[0].Named || found[0].Generation != gen || found[0].Sandbox.State != manage.StatePaused {
				t.Fatalf("Rediscover: %+v; want only sandbox %s of %s, named, generation %d, paused", found, id, key, gen)
			}
			rep, err := p.ReapUnowned(ctx, store, ReapOptions{MinAge: -1})
			if err != nil {
				t.Fatal(err)
			}
			if !exists(t, cli, containerName(id)) || len(rep.Volumes) != 0 || len(rep.Dirs) != 0 {
				t.Fatalf("the reaper on the damaged store removed what the provider made: %+v", rep)
			}
			if exists(t, cli, copied) || exists(t, cli, lookalike) || len(rep.Containers) != 2 {
				t.Fatalf("the reaper on the damaged store kept a stranger's container: %+v", rep)
			}

			m = startManager(t, p, store)
			l, err = m.Acquire(ctx, key, true)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			if l.Sandbox.ID != id || l.Generation != gen {
				t.Fatalf("after the rebuild: sandbox %s generation %d; want %s generation %d", l.Sandbox.ID, l.Generation, id, gen)
			}
			if !slices.ContainsFunc(l.Events, func(ev manage.Event) bool { return ev.Kind == manage.EventStoreRebuilt && ev.FilesKept }) {
				t.Fatalf("events of the first call after the rebuild: %+v; want the store rebuilt with the files kept", l.Events)
			}
			res, err := l.Client.Run(ctx, sh("cat /workspace/kept.txt; kill -0 "+strconv.Itoa(int(pid))+" && echo alive"), envdclient.RunOptions{})
			if err = l.Check(ctx, err); err != nil || stdout(res) != "still here\nalive\n" {
				t.Fatalf("the first call after the rebuild: %q, %v; want the file and the process", stdout(res), err)
			}
			procs, err := l.Client.List(ctx)
			if err != nil || !slices.ContainsFunc(procs, func(pi envdclient.ProcessInfo) bool { return pi.Tag == "keeper" && pi.Pid == pid }) {
				t.Fatalf("envd's processes after the rebuild: %+v, %v; want the one started before", procs, err)
			}
			rec, ok, err := store.Get(ctx, key)
			if err != nil || !ok || rec.SandboxID != id || !rec.Named {
				t.Fatalf("the rebuilt record: %+v, %v, %v", rec, ok, err)
			}

			// A later start: the store is sound, its record owns the
			// container, and the reaper keeps it and its volume.
			healthy := manage.NewMemoryStore()
			if err := healthy.Put(ctx, rec); err != nil {
				t.Fatal(err)
			}
			rep, err = p.ReapUnowned(ctx, healthy, ReapOptions{MinAge: -1})
			if err != nil || len(rep.Containers)+len(rep.Volumes)+len(rep.Dirs) != 0 {
				t.Fatalf("the reaper with the rebuilt record: %+v, %v; want nothing removed", rep, err)
			}
		})
	}
}

// Rediscover attributes a container by its labels; an older generation of
// a key that has a newer one, and a container without a generation label
// (made by an older version), are returned unattributed, to be left in
// place.
func TestRediscoverAttribution(t *testing.T) {
	p := newProvider(t, nil)
	older, _ := create(t, p, manage.SandboxConfig{Key: "k", Generation: 1})
	newer, _ := create(t, p, manage.SandboxConfig{Key: "k", Generation: 2})
	unlabelled, _ := create(t, p, manage.SandboxConfig{Key: "old"}) // generation 0: as if the label were missing
	found, err := p.Rediscover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]manage.Rediscovered{}
	for _, r := range found {
		got[r.Sandbox.ID] = r
	}
	if len(found) != 3 || got[newer.ID].Key != "k" || got[newer.ID].Generation != 2 || got[newer.ID].Named ||
		got[older.ID].Key != "" || got[unlabelled.ID].Key != "" || got[older.ID].Sandbox.State != manage.StateRunning {
		t.Fatalf("Rediscover: %+v; want %s as k's generation 2, %s and %s unattributed", found, newer.ID, older.ID, unlabelled.ID)
	}
}

// A damaged store and a named workspace whose container is gone but whose
// volume is left: the new sandbox mounts the volume, so the rebuild event
// says the workspace's files were kept (not that they are lost).
func TestDamagedStoreContainerGoneVolumeKept(t *testing.T) {
	p := newProvider(t, nil)
	cli := dockertest.Engine(t)
	ctx := t.Context()
	dir := t.TempDir()
	store := openStore(t, dir)
	m := startManager(t, p, store)
	const key = "stdio:volume-only"
	l := acquireWithKeptFile(t, m, key, "in the volume")
	id := l.Sandbox.ID
	l.Release()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	boltstoretest.Damage(t, dir, "truncated")
	if err := cli.ContainerRemove(ctx, containerName(id), container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}

	store = openStore(t, dir)
	m = startManager(t, p, store)
	l, err := m.Acquire(ctx, key, true)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	i := slices.IndexFunc(l.Events, func(ev manage.Event) bool { return ev.Kind == manage.EventStoreRebuilt })
	if i < 0 || l.Events[i].FilesKept || !l.Events[i].OnlyWorkspaceKept {
		t.Fatalf("events of the first call: %+v; want the store rebuilt, the sandbox new, its workspace files kept", l.Events)
	}
	res, err := l.Client.Run(ctx, sh("cat /workspace/kept.txt"), envdclient.RunOptions{})
	if err = l.Check(ctx, err); err != nil || stdout(res) != "in the volume\n" {
		t.Fatalf("the file in the new sandbox: %q, %v", stdout(res), err)
	}
}

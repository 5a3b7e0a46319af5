//go:build linux

package fsrpc

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

func TestPollerBufferCap(t *testing.T) {
	p := &poller{id: "w1", limit: 3}
	for i := range 5 {
		p.add(watchItem{event: &filesystem.FilesystemEvent{Name: string(rune('a' + i))}})
	}
	events, err := p.drain()
	if err != nil || len(events) != 3 || events[2].GetName() != "c" {
		t.Fatalf("first drain = %v, %v; want a, b, c", events, err)
	}
	// Events arriving after the loss wait until the loss is reported.
	p.add(watchItem{event: &filesystem.FilesystemEvent{Name: "f"}})
	_, err = p.drain()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "2 events past its buffer of 3") || !strings.Contains(err.Error(), "'w1'") {
		t.Fatalf("second drain error = %v", err)
	}
	events, err = p.drain()
	if err != nil || len(events) != 1 || events[0].GetName() != "f" {
		t.Fatalf("third drain = %v, %v; want f", events, err)
	}
	events, err = p.drain()
	if err != nil || len(events) != 0 {
		t.Fatalf("fourth drain = %v, %v; want nothing", events, err)
	}
}

func TestPollerKernelOverflow(t *testing.T) {
	p := &poller{id: "w2", limit: 10}
	p.add(watchItem{lost: true})
	_, err := p.drain()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "kernel event queue overflowed") {
		t.Fatalf("drain error = %v", err)
	}
	if events, err := p.drain(); err != nil || len(events) != 0 {
		t.Fatalf("after report: %v, %v", events, err)
	}
}

func TestNetworkFSName(t *testing.T) {
	for magic, want := range map[uint32]string{
		unix.NFS_SUPER_MAGIC:  "nfs",
		unix.CIFS_SUPER_MAGIC: "cifs",
		unix.SMB2_SUPER_MAGIC: "smb2",
		unix.FUSE_SUPER_MAGIC: "fuse",
	} {
		if got, ok := networkFSName(magic); !ok || got != want {
			t.Errorf("networkFSName(%#x) = %q, %v; want %q", magic, got, ok, want)
		}
	}
	for _, magic := range []uint32{unix.EXT4_SUPER_MAGIC, unix.TMPFS_MAGIC, unix.OVERLAYFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC} {
		if got, ok := networkFSName(magic); ok {
			t.Errorf("networkFSName(%#x) = %q, want local", magic, got)
		}
	}
	if name, ok := networkFS(t.TempDir()); ok {
		t.Errorf("the test temp dir counts as network filesystem %q", name)
	}
}

// A polling watcher nobody drains for PollerIdle is dropped, with its
// inotify watch; draining keeps it alive; and at most MaxPollers exist.
func TestIdlePollersAreDropped(t *testing.T) {
	root := t.TempDir()
	resolver, err := paths.New(root, true)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s := New(Options{Paths: resolver, PollerIdle: time.Minute, MaxPollers: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(s.Close)
	var elapsed atomic.Int64 // the fake clock: seconds since start
	start := time.Unix(1_000_000, 0)
	s.now = func() time.Time { return start.Add(time.Duration(elapsed.Load()) * time.Second) }
	advance := func(d time.Duration) { elapsed.Add(int64(d / time.Second)) }
	ctx := context.Background()

	create := func() (*poller, error) {
		t.Helper()
		res, err := s.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: root}))
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.pollers[res.Msg.GetWatcherId()], nil
	}
	drain := func(p *poller) error {
		_, err := s.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: p.id}))
		return err
	}
	running := func(p *poller) bool {
		s.mu.Lock()
		_, ok := s.watches[p.w]
		s.mu.Unlock()
		select {
		case <-p.w.done:
			return false
		default:
			return ok
		}
	}

	a, err := create()
	if err != nil {
		t.Fatal(err)
	}
	advance(50 * time.Second)
	b, err := create()
	if err != nil {
		t.Fatal(err)
	}
	advance(50 * time.Second)
	if err := drain(a); err != nil { // a was idle 100 s: dropped
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("drain of a watcher idle past PollerIdle = %v, want not_found", err)
		}
	} else {
		t.Fatal("a watcher idle past PollerIdle could still be drained")
	}
	if running(a) {
		t.Error("the dropped watcher's inotify watch is still running")
	}
	if !strings.Contains(logs.String(), "dropped a polling watcher") || !strings.Contains(logs.String(), a.id) {
		t.Errorf("the drop was not logged: %s", logs.String())
	}
	if err := drain(b); err != nil { // b was idle 50 s
		t.Fatalf("drain of a watcher within PollerIdle: %v", err)
	}
	advance(50 * time.Second)
	if err := drain(b); err != nil { // drained 50 s ago
		t.Fatalf("drain of a watcher drained within PollerIdle: %v", err)
	}

	// The cap: b and c exist, d does not fit.
	c, err := create()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := create(); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "RemoveWatcher") {
		t.Fatalf("CreateWatcher past MaxPollers = %v, want resource_exhausted naming RemoveWatcher", err)
	}
	advance(30 * time.Second)
	if err := drain(c); err != nil {
		t.Fatal(err)
	}
	// Once b is idle long enough, the timer's sweep drops it and there is
	// room again.
	advance(31 * time.Second)
	s.sweepTick()
	if running(b) {
		t.Error("b is still running after the sweep")
	}
	if !running(c) {
		t.Error("c, idle for less than PollerIdle, was dropped")
	}
	if _, err := create(); err != nil {
		t.Fatalf("CreateWatcher after the sweep made room: %v", err)
	}
	s.mu.Lock()
	n, w := len(s.pollers), len(s.watches)
	s.mu.Unlock()
	if n != 2 || w != 2 {
		t.Errorf("%d pollers and %d watches remain, want 2 and 2", n, w)
	}
}

func TestUploadDestination(t *testing.T) {
	for name, want := range map[string]string{
		".a.txt.upload-123":      "a.txt",
		"..hidden.upload-9":      ".hidden",
		".a.upload-1.upload-22":  "a.upload-1",
		"a.txt.upload-123":       "",
		".a.txt.upload-":         "",
		".a.txt.upload-12x":      "",
		"..upload-12":            "",
		".report.upload-draft.1": "",
	} {
		got, ok := uploadDestination(name)
		if ok != (want != "") || got != want {
			t.Errorf("uploadDestination(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	if p := UploadTempPattern(strings.Repeat("x", 120)); p != "."+strings.Repeat("x", 100)+".upload-*" {
		t.Errorf("UploadTempPattern of a long name: %q", p)
	}
}

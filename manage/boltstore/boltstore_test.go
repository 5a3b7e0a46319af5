package boltstore

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

func TestSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s1, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Put(ctx, manage.Record{Key: "stdio:w", SandboxID: "l1", Generation: 2}); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := s2.Get(ctx, "stdio:w")
	if err != nil || !ok || got.Generation != 2 {
		t.Fatalf("after reopen Get = %+v, %v, %v", got, ok, err)
	}
}

func TestCorruptFileMovedAside(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), bytes.Repeat([]byte("not a bolt file "), 512), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open of a corrupt file should recover: %v", err)
	}
	if err := s.Put(context.Background(), manage.Record{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	aside, _ := filepath.Glob(filepath.Join(dir, FileName+".corrupt-*"))
	if len(aside) != 1 {
		t.Fatalf("corrupt file not kept aside: %v", aside)
	}
	if !strings.Contains(logs.String(), "corrupt") {
		t.Fatalf("recovery not logged: %s", logs.String())
	}
}

// A server that replaced a damaged file and died before its rebuild was
// done leaves the damage pending: the next Open still reports it (so the
// next server rebuilds, and its reapers do not trust the empty store),
// until MarkRebuilt.
func TestDamagePendingUntilRebuilt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), bytes.Repeat([]byte("not a bolt file "), 512), 0o600); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := Open(dir, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if s.Damages() != 1 {
		t.Fatalf("Damages after opening a damaged file = %d; want 1", s.Damages())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The server died here, before its rebuild.
	s, err = Open(dir, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if s.Damages() != 1 {
		t.Fatalf("Damages at the next open, rebuild never done = %d; want 1", s.Damages())
	}
	if err := s.MarkRebuilt(); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkRebuilt(); err != nil { // no-op
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Damages() != 0 {
		t.Fatalf("Damages after the rebuild was marked done = %d; want 0", s.Damages())
	}
}

func TestLockedFileIsAClearError(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{LockTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Another "process" holds the file (bbolt's flock is per open file).
	holder, err := bolt.Open(s.Path(), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	err = s.Put(context.Background(), manage.Record{Key: "k"})
	if err == nil || !strings.Contains(err.Error(), "locked by another process") || !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("Put on a locked file = %v; want a clear locked error naming the file", err)
	}
}

func TestStateDirNotWritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(file, "state"), Options{})
	if err == nil || !strings.Contains(err.Error(), "state directory") {
		t.Fatalf("Open under a file = %v; want a state directory error", err)
	}
}

// TestStoreContract runs the shared store contract (CRUD, Lock exclusion
// within and across stores, shared records); stores opened in one test
// share a state directory, as two processes do. The tests above are
// bolt-specific.
func TestStoreContract(t *testing.T) {
	dirs := map[string]string{}
	managetest.StoreContract(t, func(t *testing.T) manage.Store {
		dir, ok := dirs[t.Name()]
		if !ok {
			dir = t.TempDir()
			dirs[t.Name()] = dir
		}
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, true)
}

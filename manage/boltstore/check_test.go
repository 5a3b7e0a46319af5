package boltstore

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// storeWithRecords opens a store in a fresh directory and puts n records.
func storeWithRecords(t *testing.T, n int, logs *bytes.Buffer) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := s.Put(t.Context(), manage.Record{Key: "stdio:w" + strings.Repeat("x", i), SandboxID: "l1", Generation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return s, dir
}

// A store file cut short (truncate -s 8192) made bbolt read past its end: a
// SIGBUS that killed every start. It is found before bbolt maps it, moved
// aside and replaced, with a warning.
func TestTruncatedFileMovedAside(t *testing.T) {
	var logs bytes.Buffer
	s, dir := storeWithRecords(t, 20, &logs)
	s.Close()
	path := filepath.Join(dir, FileName)
	if fi, err := os.Stat(path); err != nil || fi.Size() <= 8192 {
		t.Fatalf("store file %v, %v: want more than 8192 bytes to cut", fi, err)
	}
	if err := os.Truncate(path, 8192); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open of a truncated file: %v; want it moved aside and a fresh store", err)
	}
	defer s2.Close()
	aside, _ := filepath.Glob(filepath.Join(dir, FileName+".corrupt-*"))
	if len(aside) != 1 {
		t.Fatalf("truncated file not moved aside: %v", aside)
	}
	if fi, err := os.Stat(aside[0]); err != nil || fi.Size() != 8192 {
		t.Errorf("the file moved aside is %v, %v; want the 8192 bytes kept", fi, err)
	}
	if got := logs.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "truncated") || !strings.Contains(got, aside[0]) {
		t.Errorf("log = %s; want an error naming the truncation and where the file went", got)
	}
	if list, err := s2.List(t.Context()); err != nil || len(list) != 0 {
		t.Errorf("List on the fresh store = %v, %v", list, err)
	}
	if err := s2.Put(t.Context(), manage.Record{Key: "k"}); err != nil {
		t.Errorf("Put on the fresh store: %v", err)
	}
}

// A file that shrinks while it is mapped faults inside bbolt; the fault is
// an error of that operation, not the end of the process.
func TestFaultOnMappingIsAnError(t *testing.T) {
	var logs bytes.Buffer
	s, _ := storeWithRecords(t, 20, &logs)
	defer s.Close()
	err := s.view(func(tx *bolt.Tx) error {
		if err := os.Truncate(s.path, 8192); err != nil {
			return err
		}
		n := 0
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error { n += len(k) + len(v); return nil })
	})
	t.Log(err)
	if !errors.Is(err, errCorrupt) {
		t.Fatalf("a read past the end of the mapped file = %v; want a corrupt-store error", err)
	}
	// The next operation finds the damage before mapping the file.
	if err := s.Put(t.Context(), manage.Record{Key: "k"}); err != nil {
		t.Fatalf("Put after the fault: %v", err)
	}
	if !strings.Contains(logs.String(), "truncated") {
		t.Errorf("log = %s; want the truncation named", logs.String())
	}
}

// Damage bbolt survives is not treated as corruption: with one meta page
// broken it uses the other, so the file is kept.
func TestOneBadMetaPageKeepsTheFile(t *testing.T) {
	var logs bytes.Buffer
	s, dir := storeWithRecords(t, 3, &logs)
	s.Close()
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte of meta page 0's checksum.
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, boltPageHeaderSize+56); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, boltPageHeaderSize+56); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s2, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if aside, _ := filepath.Glob(filepath.Join(dir, FileName+".corrupt-*")); len(aside) != 0 {
		t.Fatalf("a file bbolt can read was moved aside: %v\n%s", aside, logs.String())
	}
	if list, err := s2.List(t.Context()); err != nil || len(list) == 0 {
		t.Errorf("List = %v, %v; want the records of the surviving meta page", list, err)
	}
}

// A damaged file's description names what is wrong.
func TestDamageDescriptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"garbage", bytes.Repeat([]byte("x"), 16384), "no valid meta page"},
		{"short", []byte{1, 2, 3}, "no valid meta page"},
	} {
		if got := damage(bytes.NewReader(tc.data), int64(len(tc.data))); !strings.Contains(got, tc.want) {
			t.Errorf("%s: damage = %q, want %q", tc.name, got, tc.want)
		}
	}
}

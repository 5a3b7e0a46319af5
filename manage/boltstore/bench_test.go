package boltstore

import (
	"context"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// BenchmarkGet is one store operation as a tool call makes it: open the
// file (checkFile first), read one record, close.
func BenchmarkGet(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		if _, ok, err := s.Get(ctx, "k"); err != nil || !ok {
			b.Fatalf("Get = %v, %v", ok, err)
		}
	}
}

// BenchmarkCheckFile is the part of every open that checkFile adds: the
// shared lock and the reads of the meta pages.
func BenchmarkCheckFile(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		if err := s.checkFile(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func benchStore(b *testing.B) *Store {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if err := s.Put(context.Background(), manage.Record{Key: "k", Provider: "local", SandboxID: "labc"}); err != nil {
		b.Fatal(err)
	}
	return s
}

//go:build unix

package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/boltstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/redisstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/redisstore/redistest"
)

// BenchmarkStores measures one round trip of Get, Put, Lock+unlock and
// ReserveSlot+release (the owner holding 3 of its 4 slots, among 100
// records) on the
// Redis store (a local redis-server over its unix socket and over loopback
// TCP) next to the bolt store, in one run so the numbers compare.
func BenchmarkStores(b *testing.B) {
	srv := redistest.Start(b, redistest.WithTCP())
	stores := []struct {
		name string
		open func(b *testing.B) manage.Store
	}{
		{"bolt", func(b *testing.B) manage.Store {
			s, err := boltstore.Open(b.TempDir(), boltstore.Options{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis-unix", func(b *testing.B) manage.Store { return open(b, srv.URL(), redisOpts()) }},
		{"redis-tcp", func(b *testing.B) manage.Store { return open(b, srv.TCPURL(), redisOpts()) }},
	}
	rec := manage.Record{Key: "http:alice:ws:default", Provider: "e2b", SandboxID: "i0123456789abcdef", Generation: 3, State: manage.StatePaused, Named: true}
	ctx := context.Background()
	for _, st := range stores {
		b.Run(st.name+"/get", func(b *testing.B) {
			s := st.open(b)
			if err := s.Put(ctx, rec); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, ok, err := s.Get(ctx, rec.Key); err != nil || !ok {
					b.Fatalf("Get = %v, %v", ok, err)
				}
			}
		})
		b.Run(st.name+"/put", func(b *testing.B) {
			s := st.open(b)
			for b.Loop() {
				if err := s.Put(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(st.name+"/reserve-slot", func(b *testing.B) {
			s := st.open(b)
			for i := range 100 {
				r := rec
				r.Key = fmt.Sprintf("other%d/ws", i)
				if i < 3 {
					r.Key = fmt.Sprintf("alice/ws%d", i)
				}
				if err := s.Put(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
			owner := func(key string) string { o, _, _ := strings.Cut(key, "/"); return o }
			req := manage.SlotRequest{Key: "alice/new", Owner: "alice", Max: 4, OwnerOf: owner, Expiry: time.Minute}
			for b.Loop() {
				release, err := s.ReserveSlot(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				release()
			}
		})
		b.Run(st.name+"/lock", func(b *testing.B) {
			s := st.open(b)
			for b.Loop() {
				_, unlock, err := s.Lock(ctx, rec.Key)
				if err != nil {
					b.Fatal(err)
				}
				unlock()
			}
		})
	}
}

func redisOpts() redisstore.Options {
	return redisstore.Options{Logger: quiet}
}

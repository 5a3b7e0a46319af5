//go:build unix

package redisstore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
	"github.com/sandbox-mcp/sandbox-mcp/manage/redisstore"
	"github.com/sandbox-mcp/sandbox-mcp/manage/redisstore/redistest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// open opens a store on srv with opts (quiet unless a Logger is set),
// closed when t ends.
func open(t testing.TB, url string, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := redisstore.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// raw is a plain client on srv, to look at and tamper with keys.
func raw(t testing.TB, srv *redistest.Server) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// Stores opened in one test share records and locks (one prefix per test),
// as replicas on one Redis do.
func TestStoreContract(t *testing.T) {
	srv := redistest.Start(t)
	managetest.StoreContract(t, func(t *testing.T) manage.Store {
		return open(t, srv.URL(), redisstore.Options{KeyPrefix: "contract:" + t.Name() + ":"})
	}, true)
}

func TestTCPURL(t *testing.T) {
	srv := redistest.Start(t, redistest.WithTCP())
	s := open(t, srv.TCPURL(), redisstore.Options{})
	if err := s.Put(t.Context(), manage.Record{Key: "k", SandboxID: "s"}); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := open(t, srv.URL(), redisstore.Options{}).Get(t.Context(), "k"); err != nil || !ok || got.SandboxID != "s" {
		t.Fatalf("Get over the unix socket of a record put over TCP = %+v, %v, %v", got, ok, err)
	}
}

func TestBadURLs(t *testing.T) {
	for _, u := range []string{"http://h:1/0", "redis://user:s3cret@h:1/notadb", "localhost:6379"} {
		_, err := redisstore.Open(t.Context(), u, redisstore.Options{})
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "redis store URL") {
			t.Errorf("Open(%q) = %v; want a URL error that never shows the password", u, err)
		}
	}
	_, err := redisstore.Open(t.Context(), "unix:///nonexistent/redis.sock", redisstore.Options{CommandTimeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "redis store at unix:/nonexistent/redis.sock unreachable") {
		t.Fatalf("Open of a missing server = %v; want the unreachable error naming the address", err)
	}
}

// The expiry rule: none while the sandbox may run, RecordTTL once paused,
// stopped or gone, set again by every Put.
func TestRecordTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := raw(t, srv)
	ctx := t.Context()
	ttl := time.Hour
	s := open(t, srv.URL(), redisstore.Options{RecordTTL: ttl})
	pttl := func() time.Duration {
		t.Helper()
		d, err := c.PTTL(ctx, redisstore.DefaultKeyPrefix+"ws:k").Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	rec := manage.Record{Key: "k", Provider: "test", SandboxID: "s", Generation: 1, State: manage.StateRunning}
	if err := s.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d != -1 {
		t.Fatalf("running record's TTL = %v; want none (-1)", d)
	}
	for _, st := range []manage.State{manage.StatePaused, manage.StateStopped, manage.StateGone} {
		if err := c.PExpire(ctx, redisstore.DefaultKeyPrefix+"ws:k", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		rec.State = st
		if err := s.Put(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if d := pttl(); d <= time.Minute || d > ttl {
			t.Fatalf("%s record's TTL after Put = %v; want it set again to about %v", st, d, ttl)
		}
	}
	rec.State = manage.StateRunning
	if err := s.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d != -1 {
		t.Fatalf("TTL after the sandbox runs again = %v; want none", d)
	}
	never := open(t, srv.URL(), redisstore.Options{RecordTTL: redisstore.NoExpiry, KeyPrefix: "never:"})
	rec.State = manage.StatePaused
	if err := never.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.PTTL(ctx, "never:ws:k").Result(); d != -1 {
		t.Fatalf("NoExpiry record's TTL = %v; want none", d)
	}
}

// A prefix or workspace key full of glob characters lists only its own
// records, and a prefix nested in another's key space does not leak into it.
func TestHostileGlobs(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	prefixes := []string{"a*", "ab:", "a?", "[ab]", "a", "b", "a\\", "n:", "n:ws:", "*", "?", "["}
	stores := map[string]*redisstore.Store{}
	for _, p := range prefixes {
		s := open(t, srv.URL(), redisstore.Options{KeyPrefix: p})
		stores[p] = s
		for _, k := range []string{"k", "*", "?", "[a-z]", "ws:x", p} {
			if err := s.Put(ctx, manage.Record{Key: k, SandboxID: p}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range prefixes {
		recs, err := stores[p].List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, r := range recs {
			if r.SandboxID != p {
				t.Errorf("prefix %q listed a record of prefix %q (key %q)", p, r.SandboxID, r.Key)
			}
			keys = append(keys, r.Key)
		}
		slices.Sort(keys)
		want := slices.Compact(slices.Sorted(slices.Values([]string{"k", "*", "?", "[a-z]", "ws:x", p})))
		if !slices.Equal(keys, want) {
			t.Errorf("prefix %q lists %q; want %q", p, keys, want)
		}
	}
	// A glob in a key is just a key.
	if _, ok, _ := stores["a"].Get(ctx, "[k]"); ok {
		t.Error(`Get("[k]") found a record`)
	}
}

// List walks more records than one SCAN batch.
func TestListManyRecords(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	s := open(t, srv.URL(), redisstore.Options{})
	c := raw(t, srv)
	pipe := c.Pipeline()
	for i := range 1000 {
		pipe.Set(ctx, redisstore.DefaultKeyPrefix+"ws:k"+time.Duration(i).String(), `{"key":"k`+time.Duration(i).String()+`"}`, 0)
	}
	// Another application's keys and a lock are skipped.
	pipe.Set(ctx, "other:ws:x", `{"key":"x"}`, 0)
	pipe.Set(ctx, redisstore.DefaultKeyPrefix+"lock:k", "token", 0)
	pipe.Set(ctx, redisstore.DefaultKeyPrefix+"ws:bad", "not json", 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List(ctx)
	if err != nil || len(recs) != 1000 {
		t.Fatalf("List = %d records, %v; want 1000", len(recs), err)
	}
}

// A lock holder that died (its key left without renewal) blocks others until
// the key expires; then one proceeds.
func TestDeadHolderExpires(t *testing.T) {
	srv := redistest.Start(t)
	c := raw(t, srv)
	s := open(t, srv.URL(), redisstore.Options{})
	ctx := t.Context()
	if err := c.Set(ctx, redisstore.DefaultKeyPrefix+"lock:k", "dead-holder", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	held, unlock, err := s.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if held.Err() != nil {
		t.Fatal("held context done at once")
	}
	if v, _ := c.Get(ctx, redisstore.DefaultKeyPrefix+"lock:k").Result(); v == "dead-holder" || v == "" {
		t.Fatalf("lock key = %q after Lock; want this holder's token", v)
	}
}

// Renewal keeps a lock alive past its expiry while it is held.
func TestRenewalKeepsTheLock(t *testing.T) {
	srv := redistest.Start(t)
	c := raw(t, srv)
	s := open(t, srv.URL(), redisstore.Options{LockExpiry: 300 * time.Millisecond})
	other := open(t, srv.URL(), redisstore.Options{LockExpiry: 300 * time.Millisecond})
	ctx := t.Context()
	held, unlock, err := s.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// Several expiries pass while the other store waits in vain.
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, u, err := other.Lock(wctx, "k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		if u != nil {
			u()
		}
		t.Fatalf("the other store's Lock = %v; want DeadlineExceeded while the lock is renewed", err)
	}
	if held.Err() != nil {
		t.Fatalf("lock lost while renewed: %v", context.Cause(held))
	}
	unlock()
	if n, _ := c.Exists(ctx, redisstore.DefaultKeyPrefix+"lock:k").Result(); n != 0 {
		t.Fatal("lock key left after unlock")
	}
}

// A holder whose lock key was taken over (it expired and another holder
// took it) learns of it through the held context, and its unlock leaves
// the new holder's key alone.
func TestLockLossIsDetectedAndReleaseOnlyByHolder(t *testing.T) {
	srv := redistest.Start(t)
	c := raw(t, srv)
	s := open(t, srv.URL(), redisstore.Options{LockExpiry: 300 * time.Millisecond})
	ctx := t.Context()
	held, unlock, err := s.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lk := redisstore.DefaultKeyPrefix + "lock:k"
	if err := c.Set(ctx, lk, "new-holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the lock's loss was not noticed")
	}
	if cause := context.Cause(held); !errors.Is(cause, manage.ErrLockLost) || !strings.Contains(cause.Error(), "another holder") {
		t.Fatalf("cause = %v; want ErrLockLost saying another holder has it", cause)
	}
	unlock()
	if v, _ := c.Get(ctx, lk).Result(); v != "new-holder" {
		t.Fatalf("lock key = %q after the old holder's unlock; want the new holder's token kept", v)
	}
}

// A Redis that stops answering while a lock is held makes the holder give
// the lock up before it can expire.
func TestLockLostWhileRedisFrozen(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv.URL(), redisstore.Options{LockExpiry: 600 * time.Millisecond, CommandTimeout: 100 * time.Millisecond})
	held, unlock, err := s.Lock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	defer srv.Thaw()
	select {
	case <-held.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the lock's loss was not noticed")
	}
	if cause := context.Cause(held); !errors.Is(cause, manage.ErrLockLost) || !strings.Contains(cause.Error(), "unreachable") {
		t.Fatalf("cause = %v; want ErrLockLost saying redis is unreachable", cause)
	}
	srv.Thaw()
	unlock()
}

// Every operation on a frozen or stopped Redis ends with the clear error,
// bounded by CommandTimeout.
func TestRedisDownIsAClearError(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv.URL(), redisstore.Options{CommandTimeout: 200 * time.Millisecond})
	ctx := t.Context()
	ops := map[string]func() error{
		"get":    func() error { _, _, err := s.Get(ctx, "k"); return err },
		"put":    func() error { return s.Put(ctx, manage.Record{Key: "k"}) },
		"delete": func() error { return s.Delete(ctx, "k") },
		"list":   func() error { _, err := s.List(ctx); return err },
		"lock": func() error {
			_, u, err := s.Lock(ctx, "k")
			if u != nil {
				u()
			}
			return err
		},
	}
	want := "redis store at unix:" + srv.Socket() + " unreachable"
	for _, down := range []string{"frozen", "stopped"} {
		if down == "frozen" {
			srv.Freeze()
		} else {
			srv.Stop()
		}
		for name, op := range ops {
			if err := op(); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s with redis %s = %v; want %q", name, down, err, want)
			}
		}
		if down == "frozen" {
			srv.Thaw()
		} else {
			srv.Start()
		}
		if err := ops["put"](); err != nil {
			t.Fatalf("put after redis came back (%s): %v", down, err)
		}
	}
}

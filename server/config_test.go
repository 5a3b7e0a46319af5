//go:build linux

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadTokens(t *testing.T) {
	p := writeFile(t, "# tokens\n\ntok-a alice\n  tok-b\tbob  \ntok-c alice\n")
	got, err := LoadTokens(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tok-a": "alice", "tok-b": "bob", "tok-c": "alice"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("got %v, want %v", got, want)
		}
	}

	for name, tc := range map[string]struct {
		content, wantErr string
	}{
		"one field":       {"tok-a alice\nlonely\n", "line 2"},
		"three fields":    {"# c\ntok-a alice extra\n", "line 2"},
		"duplicate token": {"tok-a alice\n\ntok-a bob\n", "line 3: duplicate token (first on line 1)"},
		"bad principal":   {"tok-a ali:ce\n", "line 1: invalid principal"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadTokens(writeFile(t, tc.content))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "tok-a") {
				t.Fatalf("error reveals a token: %v", err)
			}
		})
	}
	if _, err := LoadTokens(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestCheckListen(t *testing.T) {
	tokens := map[string]string{"t": "p"}
	for addr, wantOK := range map[string]bool{
		"127.0.0.1:8765": true, "localhost:8765": true, "[::1]:8765": true, "127.1.2.3:80": true, "unix:/tmp/s.sock": true,
		"0.0.0.0:8765": false, ":8765": false, "192.168.1.2:8765": false, "[::]:8765": false, "example.com:80": false,
	} {
		err := CheckListen(addr, nil)
		if (err == nil) != wantOK {
			t.Errorf("CheckListen(%q, no tokens) = %v", addr, err)
		}
		if err != nil && !strings.Contains(err.Error(), "token") {
			t.Errorf("CheckListen(%q): error does not say tokens are needed: %v", addr, err)
		}
		if err := CheckListen(addr, tokens); err != nil {
			t.Errorf("CheckListen(%q, tokens) = %v", addr, err)
		}
	}
	if err := CheckListen("no-port", nil); err == nil {
		t.Error("CheckListen accepted an address without a port")
	}
}

func TestNewValidates(t *testing.T) {
	p := managetest.New(t)
	m, err := manage.New(manage.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	deps := tools.NewDeps(m, tools.Config{}, testLogger())
	for name, cfg := range map[string]Config{
		"no deps":       {},
		"bad origin":    {Deps: deps, AllowedOrigins: []string{"example.com"}},
		"bad principal": {Deps: deps, AuthTokens: map[string]string{"tok": "a:b"}},
		"empty token":   {Deps: deps, AuthTokens: map[string]string{"": "a"}},
		"half TLS":      {Deps: deps, TLSCert: "cert.pem"},
		"bad toolset":   {Deps: tools.NewDeps(m, tools.Config{Toolsets: []string{"nope"}}, nil)},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	s, err := New(Config{Deps: deps})
	if err != nil {
		t.Fatal(err)
	}
	if ws := s.StdioWorkspace(); ws.Named || !strings.HasPrefix(ws.Key, "stdio:anon:") {
		t.Fatalf("default stdio workspace %+v", ws)
	}
	if s2, _ := New(Config{Deps: deps}); s2.StdioWorkspace().Key == s.StdioWorkspace().Key {
		t.Fatal("two servers share an anonymous stdio workspace")
	}
	if len(s.MCP().ListTools()) == 0 {
		t.Fatal("no tools registered by default")
	}
}

func TestEventStoreBounded(t *testing.T) {
	ctx := context.Background()
	s := newEventStore(4, 1<<20)
	var ids []string
	for i := range 6 {
		stream := "a"
		if i%2 == 1 {
			stream = "b"
		}
		id, err := s.StoreEvent(ctx, "s1", stream, json.RawMessage(`{"n":`+string(rune('0'+i))+`}`))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// Events 0 and 1 were evicted (at most 4 kept).
	if _, err := s.ReplayEventsAfter(ctx, "s1", ids[0], func(string, json.RawMessage) error { return nil }); !errors.Is(err, mcpserver.ErrUnknownEventID) {
		t.Fatalf("replay after an evicted event: %v", err)
	}
	var got []string
	stream, err := s.ReplayEventsAfter(ctx, "s1", ids[2], func(id string, msg json.RawMessage) error {
		got = append(got, string(msg))
		return nil
	})
	if err != nil || stream != "a" || strings.Join(got, ",") != `{"n":4}` {
		t.Fatalf("replay after event 2: stream %q events %v err %v", stream, got, err)
	}
	if _, err := s.ReplayEventsAfter(ctx, "other", ids[3], func(string, json.RawMessage) error { return nil }); !errors.Is(err, mcpserver.ErrUnknownEventID) {
		t.Fatalf("replay in another session: %v", err)
	}
	if err := s.PurgeSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReplayEventsAfter(ctx, "s1", ids[3], func(string, json.RawMessage) error { return nil }); !errors.Is(err, mcpserver.ErrUnknownEventID) {
		t.Fatalf("replay after purge: %v", err)
	}
	// The byte bound keeps at least the newest event.
	small := newEventStore(100, 10)
	for range 3 {
		if _, err := small.StoreEvent(ctx, "s", "x", json.RawMessage(`"0123456789"`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := small.sessions["s"].n; n != 1 {
		t.Fatalf("byte-bounded store kept %d events", n)
	}
}

// TestEventStoreRing stores many more events than the store keeps, on two
// streams, and checks every replay against a plain list of the events that
// should be kept: the ring wraps many times, and a byte bound drops events
// as well.
func TestEventStoreRing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name                string
		maxEvents, maxBytes int
	}{{"count-bound", 5, 1 << 20}, {"byte-bound", 40, 3 * 12}, {"one", 1, 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newEventStore(tc.maxEvents, tc.maxBytes)
			type event struct{ id, stream, msg string }
			var all, kept []event
			for i := range 100 {
				stream := []string{"a", "b", "a"}[i%3]
				msg := fmt.Sprintf(`{"n":%06d}`, i) // 12 bytes
				id, err := s.StoreEvent(ctx, "s", stream, json.RawMessage(msg))
				if err != nil {
					t.Fatal(err)
				}
				ev := event{id, stream, msg}
				all = append(all, ev)
				kept = append(kept, ev)
				for len(kept) > tc.maxEvents || (len(kept)*12 > tc.maxBytes && len(kept) > 1) {
					kept = kept[1:]
				}
				if l := s.sessions["s"]; l.n != len(kept) || l.bytes != 12*len(kept) {
					t.Fatalf("after %d events: holds %d (%d bytes), want %d", i+1, l.n, l.bytes, len(kept))
				}
				for _, from := range all {
					var got []string
					stream, err := s.ReplayEventsAfter(ctx, "s", from.id, func(_ string, m json.RawMessage) error {
						got = append(got, string(m))
						return nil
					})
					k := slices.IndexFunc(kept, func(e event) bool { return e.id == from.id })
					if k < 0 {
						if !errors.Is(err, mcpserver.ErrUnknownEventID) {
							t.Fatalf("replay after evicted event %s: %v", from.id, err)
						}
						continue
					}
					var want []string
					for _, e := range kept[k+1:] {
						if e.stream == from.stream {
							want = append(want, e.msg)
						}
					}
					if err != nil || stream != from.stream || !slices.Equal(got, want) {
						t.Fatalf("replay after %s: stream %q events %v err %v; want %q %v", from.id, stream, got, err, from.stream, want)
					}
				}
			}
		})
	}
}

func TestQuoteLabel(t *testing.T) {
	if got, want := quote("a\\b\"c\nd"), `"a\\b\"c\nd"`; got != want {
		t.Fatalf("quote = %s, want %s", got, want)
	}
}

func TestNotifyCounterResyncsAfterTimeout(t *testing.T) {
	c := newNotifyCounter()
	c.queued.Add(2)
	c.wrote()
	// One of the two was dropped: the wait times out once...
	if c.waitWritten(context.Background(), 2, 10*time.Millisecond) {
		t.Fatal("waitWritten reported a notification that was never written")
	}
	// ...and later waits are not held by it.
	c.queued.Add(1)
	done := make(chan bool, 1)
	go func() { done <- c.waitWritten(context.Background(), 3, failTimeout) }()
	c.wrote()
	if !recv(t, done, "the wait for the next notification") {
		t.Fatal("waitWritten did not see the next notification")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.queued.Add(1)
	if c.waitWritten(ctx, 4, failTimeout) {
		t.Fatal("waitWritten after ctx end reported success")
	}
}

func TestPrincipalOfKey(t *testing.T) {
	for key, want := range map[string]string{
		SessionKey("alice", "s1"):  "alice",
		NamedKey("bob@x.org", "w"): "bob@x.org",
		"stdio:default":            "",
		"http:broken":              "",
	} {
		if got := PrincipalOfKey(key); got != want {
			t.Errorf("PrincipalOfKey(%q) = %q, want %q", key, got, want)
		}
	}
}

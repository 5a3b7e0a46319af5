package identity

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"testing"
)

func TestParseBasic(t *testing.T) {
	enc := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	for header, want := range map[string]string{"": "", enc("user:"): "user", enc("root:pw"): "root", enc("nopassword"): "nopassword", "basic " + base64.StdEncoding.EncodeToString([]byte("u:")): "u"} {
		got, err := ParseBasic(header)
		if err != nil || got != want {
			t.Errorf("ParseBasic(%q) = %q, %v; want %q", header, got, err, want)
		}
	}
	for _, bad := range []string{"Bearer abc", "Basic !!!", "Basic"} {
		if _, err := ParseBasic(bad); err == nil {
			t.Errorf("ParseBasic(%q) succeeded", bad)
		}
	}
}

func TestLookup(t *testing.T) {
	var logs bytes.Buffer
	r := NewResolver(ResolverOptions{Home: "/workspace", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	self := r.Self()
	if self.UID != uint32(os.Getuid()) || self.Home != "/workspace" || self.Switch {
		t.Fatalf("Self = %+v", self)
	}
	if got := r.Lookup(""); got != self {
		t.Errorf("Lookup(\"\") = %+v, want self", got)
	}
	// An unknown name runs as the daemon's own user, logged once.
	for range 2 {
		if got := r.Lookup("no-such-user-xyz"); got != self {
			t.Errorf("unknown user resolved to %+v, want self", got)
		}
	}
	if n := strings.Count(logs.String(), "no-such-user-xyz"); n != 1 {
		t.Errorf("substitution logged %d times, want once: %s", n, logs.String())
	}
	// As root, an existing other user is switched to.
	if os.Getuid() == 0 {
		r.lookup = func(name string) (*user.User, error) {
			if name == "alice" {
				return &user.User{Username: "alice", Uid: "1234", Gid: "1235", HomeDir: "/home/alice"}, nil
			}
			return nil, errors.New("unknown")
		}
		got := r.Lookup("alice")
		if got.UID != 1234 || got.GID != 1235 || !got.Switch || got.Home != "/home/alice" {
			t.Errorf("Lookup(alice) as root = %+v", got)
		}
	}
}

func TestContext(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Fatal("empty context has a user")
	}
	u := User{Name: "x", UID: 5}
	got, ok := FromContext(WithUser(context.Background(), u))
	if !ok || got != u {
		t.Fatalf("FromContext = %+v, %v", got, ok)
	}

	r := NewResolver(ResolverOptions{Home: "/workspace"})
	if got := r.FromContext(WithUser(context.Background(), u)); got != u {
		t.Errorf("Resolver.FromContext with a user = %+v, want %+v", got, u)
	}
	if got := r.FromContext(context.Background()); got != r.Lookup("") {
		t.Errorf("Resolver.FromContext without a user = %+v, want the default %+v", got, r.Lookup(""))
	}
}

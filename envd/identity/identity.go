// Package identity resolves the user a request to envd acts as.
//
// E2B's SDKs name a user on every call: RPCs carry `Authorization: Basic
// base64("<user>:")` and REST calls a `username` query parameter. E2B's envd
// runs as root inside a microVM and switches to that user. sandbox-mcp's envd
// may instead run unprivileged (inside bubblewrap, as uid 1000 in a user
// namespace), where switching is impossible. The rule here: a daemon running
// as root runs work as the named user when that user exists; otherwise work
// runs as the daemon's own user, and the substitution is logged once per name.
// A request is never refused only because the name is unknown.
package identity

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
)

// User is the account a request acts as.
type User struct {
	// Name is the account name ("root", "user", …).
	Name string
	// UID and GID are the numeric ids work runs under.
	UID, GID uint32
	// Home is the account's home directory.
	Home string
	// Switch reports whether spawned processes must change credentials to
	// UID/GID (the daemon runs as root and the user differs from the daemon's).
	Switch bool
}

// Resolver maps user names to Users. It is safe for concurrent use.
type Resolver struct {
	self        User
	defaultUser string
	log         *slog.Logger
	lookup      func(name string) (*user.User, error)

	mu    sync.Mutex
	cache map[string]User // every name resolved so far, so each is noted once
}

// ResolverOptions configures NewResolver. The zero value is usable.
type ResolverOptions struct {
	// DefaultUser is the name used when a request names none. Empty means the
	// daemon's own user.
	DefaultUser string
	// Home overrides the home directory reported for the daemon's own user
	// (sandbox-mcp points it at the workspace root). Empty means $HOME, or the
	// passwd entry's home.
	Home string
	// Logger receives the one-time notes about substituted users. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// NewResolver returns a Resolver for a daemon running as the current process
// user.
func NewResolver(opts ResolverOptions) *Resolver {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	self := User{Name: strconv.Itoa(int(uid)), UID: uid, GID: gid}
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		self.Name = u.Username
		self.Home = u.HomeDir
	}
	if h := os.Getenv("HOME"); h != "" {
		self.Home = h
	}
	if opts.Home != "" {
		self.Home = opts.Home
	}
	if self.Home == "" {
		self.Home = "/"
	}
	return &Resolver{
		self:        self,
		defaultUser: opts.DefaultUser,
		log:         log,
		lookup:      user.Lookup,
		cache:       map[string]User{},
	}
}

// Self returns the daemon's own user.
func (r *Resolver) Self() User { return r.self }

// FromContext returns the user a request acts as: the one WithUser put in
// ctx (the daemon's middleware does, from the request's Basic auth), else
// the default user.
func (r *Resolver) FromContext(ctx context.Context) User {
	if u, ok := FromContext(ctx); ok {
		return u
	}
	return r.Lookup("")
}

// Lookup resolves name to a User. An empty name means the default user. A
// name that does not exist, or that cannot be switched to because the daemon
// is not root, resolves to the daemon's own user (logged once per name).
func (r *Resolver) Lookup(name string) User {
	if name == "" {
		name = r.defaultUser
	}
	if name == "" || name == r.self.Name {
		return r.self
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if u, ok := r.cache[name]; ok {
		return u
	}
	u := r.resolve(name)
	r.cache[name] = u
	return u
}

// resolve looks name up; Lookup caches the result, so it runs, and notes a
// substitution, once per name.
func (r *Resolver) resolve(name string) User {
	if r.self.UID != 0 {
		r.note(name, "the daemon is not root and cannot switch users")
		return r.self
	}
	pw, err := r.lookup(name)
	if err != nil {
		r.note(name, "no such user on this system")
		return r.self
	}
	uid, err1 := strconv.ParseUint(pw.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(pw.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		r.note(name, "its passwd entry has non-numeric ids")
		return r.self
	}
	u := User{Name: pw.Username, UID: uint32(uid), GID: uint32(gid), Home: pw.HomeDir}
	if u.Home == "" {
		u.Home = "/"
	}
	u.Switch = u.UID != r.self.UID || u.GID != r.self.GID
	return u
}

func (r *Resolver) note(name, why string) {
	r.log.Info("running requests for user as the daemon's own user",
		"requested_user", name, "reason", why, "acting_user", r.self.Name)
}

// ParseBasic extracts the user name from an `Authorization: Basic` header
// value. It returns "" and no error when the header is empty.
func ParseBasic(header string) (string, error) {
	if header == "" {
		return "", nil
	}
	scheme, payload, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", fmt.Errorf("authorization header %q is not Basic", redact(header))
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(payload))
	if err != nil {
		return "", fmt.Errorf("authorization header is not valid base64: %w", err)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name, nil
}

func redact(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

type ctxKey struct{}

// WithUser returns a context carrying u.
func WithUser(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, ctxKey{}, u)
}

// FromContext returns the User stored by WithUser.
func FromContext(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(ctxKey{}).(User)
	return u, ok
}

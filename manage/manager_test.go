//go:build linux

package manage_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newManager(t *testing.T, p manage.Provider, mod func(*manage.Options)) *manage.Manager {
	t.Helper()
	opts := manage.Options{Provider: p, AutoRecreate: true, Logger: quiet}
	if mod != nil {
		mod(&opts)
	}
	m, err := manage.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	return m
}

func acquire(t *testing.T, m *manage.Manager, key string) *manage.Lease {
	t.Helper()
	l, err := m.Acquire(t.Context(), key, false)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func sh(script string) envdclient.Command {
	return envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

// counter is a file outside every sandbox that commands append to, so a test
// can count how many times a command really ran.
type counter string

func newCounter(t *testing.T) counter { return counter(filepath.Join(t.TempDir(), "runs")) }

func (c counter) script(then string) string {
	return "echo ran >> " + string(c) + "; " + then
}

func (c counter) count(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile(string(c))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(raw), "ran\n")
}

// firstWrite returns a writer that closes ch on its first write.
func firstWrite(ch chan struct{}) io.Writer {
	var once sync.Once
	return writerFunc(func(p []byte) (int, error) {
		once.Do(func() { close(ch) })
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// lockSignalStore reports every creation-lock request, so a test knows a
// creation has started (and is about to wait for the lock or take it).
type lockSignalStore struct {
	manage.Store
	requested chan string
}

func (s lockSignalStore) Lock(ctx context.Context, key string) (context.Context, func(), error) {
	s.requested <- key
	return s.Store.Lock(ctx, key)
}

// hookProvider wraps a provider to inject faults into single calls.
type hookProvider struct {
	manage.Provider
	mu       sync.Mutex
	endpoint func() error // called before Endpoint; an error fails it
	info     func(ctx context.Context) error
	create   func() error
}

func (h *hookProvider) hook(get func(*hookProvider) func() error) error {
	h.mu.Lock()
	f := get(h)
	h.mu.Unlock()
	if f == nil {
		return nil
	}
	return f()
}

func (h *hookProvider) Endpoint(ctx context.Context, id string) (manage.Endpoint, error) {
	if err := h.hook(func(h *hookProvider) func() error { return h.endpoint }); err != nil {
		return manage.Endpoint{}, err
	}
	return h.Provider.Endpoint(ctx, id)
}

func (h *hookProvider) Info(ctx context.Context, id string) (manage.Sandbox, error) {
	h.mu.Lock()
	f := h.info
	h.mu.Unlock()
	if f != nil {
		if err := f(ctx); err != nil {
			return manage.Sandbox{}, err
		}
	}
	return h.Provider.Info(ctx, id)
}

func (h *hookProvider) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
	if err := h.hook(func(h *hookProvider) func() error { return h.create }); err != nil {
		return manage.Sandbox{}, err
	}
	return h.Provider.Create(ctx, cfg)
}

//go:build linux

package local

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/internal/sandboxid"
)

// entry serialises the operations on one sandbox and holds its daemon.
type entry struct {
	sem chan struct{} // a one-slot lock that a waiter can abandon
	d   *daemon       // the current or last daemon; nil if none was started
}

// entry returns id's entry, creating it.
func (p *Provider) entry(id string) *entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[id]
	if !ok {
		e = &entry{sem: make(chan struct{}, 1)}
		p.entries[id] = e
	}
	return e
}

func (e *entry) acquire(ctx context.Context) error {
	select {
	case e.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *entry) release() { <-e.sem }

// forget drops id's entry after its sandbox is gone.
func (p *Provider) forget(id string) {
	p.mu.Lock()
	delete(p.entries, id)
	p.mu.Unlock()
}

// setDaemon records e's new daemon; the caller holds e's lock. When the
// Provider was closed while the daemon started, Close did not see it: it is
// stopped here (waiting until ctx ends), as Close would have, and the result
// is FailedPrecondition.
func (p *Provider) setDaemon(ctx context.Context, e *entry, d *daemon) error {
	p.mu.Lock()
	e.d = d
	closed := p.closed
	p.mu.Unlock()
	if !closed {
		return nil
	}
	if err := p.stopDaemon(ctx, d, closedReason); err == nil {
		_ = awaitRelease(ctx, d)
	}
	return errClosed()
}

// awaitRelease waits until a daemon that ended released the owner lock (at
// once: the waiter does it right after closing done).
func awaitRelease(ctx context.Context, d *daemon) error {
	if d == nil {
		return nil
	}
	select {
	case <-d.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// metadata is sandbox.json.
type metadata struct {
	ID        string               `json:"id"`
	CreatedAt time.Time            `json:"created_at"`
	Config    manage.SandboxConfig `json:"config"`
}

func readMeta(dir string) (metadata, error) {
	data, err := os.ReadFile(filepath.Join(dir, metadataFile))
	if err != nil {
		return metadata{}, err
	}
	var m metadata
	if err := json.Unmarshal(data, &m); err != nil {
		return metadata{}, err
	}
	return m, nil
}

// idAlphabet is E2B's id alphabet: lowercase letters and digits.
const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// newID returns "l" and 15 random characters of idAlphabet.
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (Go 1.24 and later)
	b[0] = 'l'
	for i := 1; i < len(b); i++ {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

// randomSuffix returns 15 random characters of idAlphabet.
func randomSuffix() string { return newID()[1:] }

// validID reports whether id can name a local sandbox: 1 to 64 lowercase
// letters and digits. Checked before any path is built from an id.
func validID(id string) bool { return sandboxid.Valid(id) }

func checkID(id string) error {
	if !validID(id) {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("sandbox id %q is not valid: want lowercase letters and digits", id))
	}
	return nil
}

func notFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("sandbox %s not found", id))
}

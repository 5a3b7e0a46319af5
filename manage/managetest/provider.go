//go:build linux

// Package managetest provides a manage.Provider for tests: each sandbox is a
// temporary directory served by a real envd daemon running in the test
// process on a unix socket (no isolation, --confine on). It is the real
// daemon and the real client end to end; only the isolation is missing, so
// tests of the Manager, the tools and the server run anywhere.
//
// Faults can be injected: LoseDaemon stops a sandbox's daemon (its socket
// then refuses connections, as when a daemon is killed), BlockCreate holds
// creations until released, and InfoErr makes Info inconclusive.
//
// StoreContract holds the tests every manage.Store passes.
package managetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Provider is an in-process manage.Provider. The zero value is not usable;
// call New.
type Provider struct {
	dir string
	log *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	infoErr   error
	infoHang  bool
	block     chan struct{}
	waiting   chan struct{}
	paused    chan string

	// Creates counts successful Create calls.
	Creates atomic.Int64
}

type sandbox struct {
	id      string
	root    string
	sock    string
	env     map[string]string // the environment it was created with
	created time.Time
	state   manage.State
	detail  string
	endedAt time.Time
	d       *daemon.Daemon
	ln      net.Listener
	served  chan struct{}
}

// TB is the part of testing.TB the provider needs.
type TB interface {
	Cleanup(func())
}

// New returns a Provider whose sandboxes live under a new temporary
// directory; when the test ends every daemon is stopped and the directory
// removed.
func New(t TB) *Provider {
	// Unix socket paths are limited to 108 bytes; test temp dirs can be long.
	dir, err := os.MkdirTemp("", "mgt")
	if err != nil {
		panic(err)
	}
	p := &Provider{dir: dir, log: slog.New(slog.NewTextHandler(io.Discard, nil)), sandboxes: map[string]*sandbox{}}
	t.Cleanup(func() {
		p.mu.Lock()
		for _, sb := range p.sandboxes {
			sb.stop()
		}
		p.mu.Unlock()
		os.RemoveAll(dir)
	})
	return p
}

// Name implements manage.Provider.
func (p *Provider) Name() string { return "test" }

// SetInfoError makes Info fail with err (nil restores it).
func (p *Provider) SetInfoError(err error) {
	p.mu.Lock()
	p.infoErr = err
	p.mu.Unlock()
}

// SetInfoHang makes Info block until its context ends (a provider that
// hangs).
func (p *Provider) SetInfoHang(hang bool) {
	p.mu.Lock()
	p.infoHang = hang
	p.mu.Unlock()
}

// PauseEvents returns a channel that receives the id of every sandbox
// paused from now on (buffered; events beyond its room are dropped).
func (p *Provider) PauseEvents() <-chan string {
	ch := make(chan string, 64)
	p.mu.Lock()
	p.paused = ch
	p.mu.Unlock()
	return ch
}

// BlockCreate makes Create wait until release is called (the sandbox is
// made after the release). waiting receives a value each time a Create
// reaches the block.
func (p *Provider) BlockCreate() (waiting <-chan struct{}, release func()) {
	ch := make(chan struct{})
	w := make(chan struct{}, 64)
	p.mu.Lock()
	p.block = ch
	p.waiting = w
	p.mu.Unlock()
	var once sync.Once
	return w, func() {
		once.Do(func() {
			p.mu.Lock()
			if p.block == ch {
				p.block = nil
			}
			p.mu.Unlock()
			close(ch)
		})
	}
}

// Create implements manage.Provider.
func (p *Provider) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
	p.mu.Lock()
	block, waiting := p.block, p.waiting
	p.mu.Unlock()
	if block != nil {
		waiting <- struct{}{}
		select {
		case <-block:
		case <-ctx.Done():
			return manage.Sandbox{}, ctx.Err()
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := "t" + hex.EncodeToString(b[:])
	sb := &sandbox{id: id, root: filepath.Join(p.dir, id, "ws"), sock: filepath.Join(p.dir, id, "s"), env: maps.Clone(cfg.Env), created: time.Now()}
	if err := os.MkdirAll(sb.root, 0o755); err != nil {
		return manage.Sandbox{}, err
	}
	if err := p.start(sb); err != nil {
		return manage.Sandbox{}, err
	}
	p.mu.Lock()
	p.sandboxes[id] = sb
	p.mu.Unlock()
	p.Creates.Add(1)
	return p.describe(sb), nil
}

// start serves sb with a new daemon, with the environment sb was created
// with.
func (p *Provider) start(sb *sandbox) error {
	d, err := daemon.New(daemon.Config{Root: sb.root, Confine: true, Env: sb.env, Logger: p.log})
	if err != nil {
		return err
	}
	ln, err := daemon.Listen("unix:" + sb.sock)
	if err != nil {
		return err
	}
	sb.d, sb.ln, sb.served = d, ln, make(chan struct{})
	sb.state, sb.detail, sb.endedAt = manage.StateRunning, "", time.Time{}
	go func() {
		defer close(sb.served)
		_ = d.Serve(ln)
	}()
	return nil
}

func (sb *sandbox) stop() {
	if sb.d == nil {
		return
	}
	sb.d.Close()
	<-sb.served
	sb.d = nil
}

// crash stops the daemon as a crash would: connections dropped first.
func (sb *sandbox) crash() {
	if sb.d == nil {
		return
	}
	sb.d.Abort()
	<-sb.served
	sb.d = nil
}

func (p *Provider) describe(sb *sandbox) manage.Sandbox {
	return manage.Sandbox{
		ID: sb.id, Provider: p.Name(), State: sb.state, Detail: sb.detail, CreatedAt: sb.created,
		Isolation: "none", Workdir: sb.root, EnvdVersion: daemon.Version, EndedAt: sb.endedAt,
	}
}

// LoseDaemon stops sandbox id's daemon as a crash would: its processes are
// killed and its socket refuses connections. With keepFiles the sandbox is
// then reported stopped (files kept); otherwise its files are removed and it
// is reported gone.
func (p *Provider) LoseDaemon(id string, keepFiles bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, ok := p.sandboxes[id]
	if !ok {
		return fmt.Errorf("no sandbox %s", id)
	}
	sb.crash()
	sb.endedAt = time.Now()
	if keepFiles {
		sb.state, sb.detail = manage.StateStopped, "daemon exited: signal: killed"
		return nil
	}
	sb.state, sb.detail = manage.StateGone, "not found"
	return os.RemoveAll(filepath.Dir(sb.root))
}

// Info implements manage.Provider.
func (p *Provider) Info(ctx context.Context, id string) (manage.Sandbox, error) {
	p.mu.Lock()
	hang := p.infoHang
	p.mu.Unlock()
	if hang {
		<-ctx.Done()
		return manage.Sandbox{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.infoErr != nil {
		return manage.Sandbox{}, p.infoErr
	}
	sb, ok := p.sandboxes[id]
	if !ok {
		return manage.Sandbox{ID: id, Provider: p.Name(), State: manage.StateGone, Detail: "not found"}, nil
	}
	return p.describe(sb), nil
}

// Endpoint implements manage.Provider.
func (p *Provider) Endpoint(_ context.Context, id string) (manage.Endpoint, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, ok := p.sandboxes[id]
	if !ok {
		return manage.Endpoint{}, fmt.Errorf("sandbox %s not found", id)
	}
	return manage.Endpoint{URL: "unix:" + sb.sock, EnvdVersion: daemon.Version}, nil
}

// Pause implements manage.Provider (the in-process daemon cannot be frozen;
// the state is recorded only).
func (p *Provider) Pause(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, ok := p.sandboxes[id]
	if !ok || sb.state == manage.StateGone {
		return fmt.Errorf("sandbox %s not found", id)
	}
	if sb.state == manage.StateRunning {
		sb.state = manage.StatePaused
		if p.paused != nil {
			select {
			case p.paused <- id:
			default:
			}
		}
	}
	return nil
}

// Resume implements manage.Provider; a stopped sandbox gets a new daemon.
func (p *Provider) Resume(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, ok := p.sandboxes[id]
	if !ok || sb.state == manage.StateGone {
		return fmt.Errorf("sandbox %s not found", id)
	}
	switch sb.state {
	case manage.StatePaused:
		sb.state = manage.StateRunning
	case manage.StateStopped:
		return p.start(sb)
	}
	return nil
}

// Kill implements manage.Provider.
func (p *Provider) Kill(_ context.Context, id string) error {
	p.mu.Lock()
	sb, ok := p.sandboxes[id]
	delete(p.sandboxes, id)
	p.mu.Unlock()
	if !ok {
		return nil
	}
	sb.stop()
	return os.RemoveAll(filepath.Dir(sb.root))
}

// List implements manage.Provider.
func (p *Provider) List(context.Context) ([]manage.Sandbox, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]manage.Sandbox, 0, len(p.sandboxes))
	for _, sb := range p.sandboxes {
		out = append(out, p.describe(sb))
	}
	return out, nil
}

// Live returns the ids of sandboxes that exist (any state but gone).
func (p *Provider) Live() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for id, sb := range p.sandboxes {
		if sb.state != manage.StateGone {
			ids = append(ids, id)
		}
	}
	return ids
}

var _ manage.Provider = (*Provider)(nil)

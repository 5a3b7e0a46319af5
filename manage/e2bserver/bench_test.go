//go:build linux

package e2bserver

import (
	"context"
	"net/http"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

// The benchmarks measure create, pause, resume and running `true` through
// the management server and its proxy (server/…) next to the same
// operations on the local provider directly (local/…), in one run:
//
//	go test -run '^$' -bench . -count 5 ./manage/e2bserver/

func BenchmarkCreate(b *testing.B) {
	p := newLocalProvider(b)
	ctx := context.Background()
	b.Run("local", func(b *testing.B) {
		for b.Loop() {
			sb, err := p.Create(ctx, manage.SandboxConfig{})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := p.Kill(ctx, sb.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	h := start(b, p, "")
	b.Run("server", func(b *testing.B) {
		for b.Loop() {
			sb := h.create(keyA, e2bapi.NewSandbox{Timeout: 600})
			b.StopTimer()
			h.status(http.StatusNoContent, keyA, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil)
			b.StartTimer()
		}
	})
}

func BenchmarkPauseResume(b *testing.B) {
	p := newLocalProvider(b)
	ctx := context.Background()
	sb, err := p.Create(ctx, manage.SandboxConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Kill(ctx, sb.ID) })
	// pause times Pause (Resume untimed); resume the other way round.
	localOp := func(timed, untimed func(context.Context, string) error) func(*testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				if err := timed(ctx, sb.ID); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := untimed(ctx, sb.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		}
	}
	b.Run("local/pause", localOp(p.Pause, p.Resume))
	if err := p.Pause(ctx, sb.ID); err != nil {
		b.Fatal(err)
	}
	b.Run("local/resume", localOp(p.Resume, p.Pause))
	if err := p.Resume(ctx, sb.ID); err != nil {
		b.Fatal(err)
	}

	h := start(b, p, "")
	s := h.create(keyA, e2bapi.NewSandbox{Timeout: 3600})
	pause := func() {
		h.status(http.StatusNoContent, keyA, http.MethodPost, "/sandboxes/"+s.SandboxID+"/pause", nil, nil)
	}
	resume := func() {
		h.status(http.StatusCreated, keyA, http.MethodPost, "/sandboxes/"+s.SandboxID+"/connect", e2bapi.ConnectSandbox{Timeout: 3600}, nil)
	}
	serverOp := func(timed, untimed func()) func(*testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				timed()
				b.StopTimer()
				untimed()
				b.StartTimer()
			}
		}
	}
	b.Run("server/pause", serverOp(pause, resume))
	pause()
	b.Run("server/resume", serverOp(resume, pause))
}

func BenchmarkTrue(b *testing.B) {
	p := newLocalProvider(b)
	ctx := context.Background()
	sb, err := p.Create(ctx, manage.SandboxConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Kill(ctx, sb.ID) })
	b.Run("local", func(b *testing.B) {
		c := localClient(b, p, sb.ID)
		for b.Loop() {
			runTrue(b, c)
		}
	})
	h := start(b, p, "")
	s := h.create(keyA, e2bapi.NewSandbox{Timeout: 3600, Secure: ptr(true)})
	b.Run("server", func(b *testing.B) {
		c := h.envd(s)
		for b.Loop() {
			runTrue(b, c)
		}
	})
}

// localClient is an envd client straight to a local sandbox's socket.
func localClient(b *testing.B, p *local.Provider, id string) *envdclient.Client {
	b.Helper()
	ep, err := p.Endpoint(context.Background(), id)
	if err != nil {
		b.Fatal(err)
	}
	c, err := envdclient.New(ep.URL, append(ep.ClientOptions, envdclient.WithJSON())...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

//go:build linux

package docker

// Test helpers: a provider on the real engine (package dockertest: the
// engine, and a test image made from the host's static busybox), with the
// lean envd built from this tree.

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker/dockertest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// failGuard bounds waits that only last that long when something is broken.
const failGuard = 60 * time.Second

// newProvider returns a provider on the test engine with the test image as
// its default, a new short state directory and the lean envd built from this
// tree; every sandbox it made is removed when the test ends.
func newProvider(t testing.TB, mod func(*Config)) *Provider {
	t.Helper()
	cli := dockertest.Engine(t)
	cfg := Config{
		StateDir:   envdtest.ShortTempDir(t),
		Image:      dockertest.BusyboxImage(t, cli),
		EnvdBinary: envdtest.LeanBinary(t),
		Logger:     quiet,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), failGuard)
		defer cancel()
		sbs, _ := p.List(ctx)
		for _, sb := range sbs {
			_ = p.Kill(ctx, sb.ID)
		}
		_ = p.Close(ctx)
	})
	return p
}

// create makes a sandbox with cfg and returns it with a client of its envd.
func create(t testing.TB, p *Provider, cfg manage.SandboxConfig) (manage.Sandbox, *envdclient.Client) {
	t.Helper()
	sb, err := p.Create(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sb, dial(t, p, sb.ID)
}

// dial returns a client of sandbox id's envd through Endpoint.
func dial(t testing.TB, p *Provider, id string) *envdclient.Client {
	t.Helper()
	ep, err := p.Endpoint(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := envdclient.New(ep.URL, envdclient.WithAccessToken(ep.AccessToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func sh(script string) envdclient.Command {
	return envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

// run runs script in the sandbox and returns its result, failing the test on
// an RPC error.
func run(t testing.TB, c *envdclient.Client, script string) *envdclient.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), failGuard)
	defer cancel()
	res, err := c.Run(ctx, sh(script), envdclient.RunOptions{})
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	return res
}

func stdout(res *envdclient.Result) string { return string(res.Stdout.Bytes()) }

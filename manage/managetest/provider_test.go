//go:build linux

package managetest_test

import (
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// A stopped sandbox that is resumed gets a new daemon with the environment
// the sandbox was created with.
func TestResumeKeepsEnv(t *testing.T) {
	ctx := t.Context()
	p := managetest.New(t)
	sb, err := p.Create(ctx, manage.SandboxConfig{Env: map[string]string{"SBX_TEST_ENV": "kept"}})
	if err != nil {
		t.Fatal(err)
	}
	env := func() string {
		t.Helper()
		ep, err := p.Endpoint(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		c, err := envdclient.New(ep.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		res, err := c.Run(ctx, envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", `printf %s "$SBX_TEST_ENV"`}}, envdclient.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout.Bytes())
	}
	if got := env(); got != "kept" {
		t.Fatalf("env after Create = %q, want kept", got)
	}
	if err := p.LoseDaemon(sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if info, err := p.Info(ctx, sb.ID); err != nil || info.State != manage.StateStopped {
		t.Fatalf("Info after LoseDaemon(keepFiles) = %+v, %v; want stopped", info, err)
	}
	if err := p.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := env(); got != "kept" {
		t.Fatalf("env after Resume of a stopped sandbox = %q, want kept", got)
	}
}

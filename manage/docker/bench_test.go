//go:build linux

package docker

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker/dockertest"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// BenchmarkCreateToFirstRun measures a cold Create (container create,
// attach, start, envd ready, socket linked) and the first Run of `true`
// through the envd client: what a first tool call waits for. Kill is
// outside the timer. See managetest.BenchCreateToFirstRun.
func BenchmarkCreateToFirstRun(b *testing.B) {
	managetest.BenchCreateToFirstRun(b, newProvider(b, nil))
}

// BenchmarkExecTrue compares running `true` in a running sandbox through
// envd (what every tool call does) with an exec through the Engine API
// (what `docker exec` does: exec create, attach and start, inspect).
func BenchmarkExecTrue(b *testing.B) {
	p := newProvider(b, nil)
	sb, c := create(b, p, manage.SandboxConfig{})
	ctx := context.Background()
	b.Run("envd", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			res, err := c.Run(ctx, envdclient.Command{Cmd: "true"}, envdclient.RunOptions{})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("run true: %+v, %v", res, err)
			}
			ds = append(ds, time.Since(start))
		}
		envdtest.ReportPercentiles(b, ds)
	})
	b.Run("engine-exec", func(b *testing.B) {
		cli := dockertest.Engine(b)
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			ex, err := cli.ContainerExecCreate(ctx, containerName(sb.ID), container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
			if err != nil {
				b.Fatal(err)
			}
			att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, att.Reader)
			att.Close()
			in, err := cli.ContainerExecInspect(ctx, ex.ID)
			if err != nil || in.Running || in.ExitCode != 0 {
				b.Fatalf("exec true: %+v, %v", in, err)
			}
			ds = append(ds, time.Since(start))
		}
		envdtest.ReportPercentiles(b, ds)
	})
}

//go:build linux

package docker

import (
	"context"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker/dockertest"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// BenchmarkCreateToFirstRun measures a cold Create (container create,
// attach, start, envd ready, socket linked or port read) and the first Run
// of `true` through the envd client: what a first tool call waits for, on
// each transport. Kill is outside the timer. See
// managetest.BenchCreateToFirstRun.
func BenchmarkCreateToFirstRun(b *testing.B) {
	for _, tr := range []Transport{TransportSocket, TransportTCP} {
		b.Run(string(tr), func(b *testing.B) {
			managetest.BenchCreateToFirstRun(b, newProvider(b, func(c *Config) { c.Transport = tr }))
		})
	}
}

// dockerCLI returns the docker command, ending the benchmark when there is
// none.
func dockerCLI(b *testing.B) string {
	path, err := exec.LookPath("docker")
	if err != nil {
		testenv.Missing(b, "the docker command (apt-get install docker.io), the baseline of these benchmarks")
	}
	return path
}

// timeCommand runs argv b.N times, each to its end, and reports the
// percentiles of its wall time.
func timeCommand(b *testing.B, argv ...string) {
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("%v: %v: %s", argv, err, out)
		}
		ds = append(ds, time.Since(start))
	}
	envdtest.ReportPercentiles(b, ds)
}

// BenchmarkDockerRunTrue is the baseline of a cold create: `docker run --rm
// IMAGE true` with the network off, through the docker command.
func BenchmarkDockerRunTrue(b *testing.B) {
	docker := dockerCLI(b)
	img := dockertest.BusyboxImage(b, dockertest.Engine(b))
	timeCommand(b, docker, "run", "--rm", "--network", "none", img, "true")
}

// BenchmarkExecTrue compares running `true` in a running sandbox through
// envd (what every tool call does, on each transport) with an exec through
// the Engine API (exec create, attach and start, inspect) and with the
// docker command's `docker exec CONTAINER true`.
func BenchmarkExecTrue(b *testing.B) {
	ctx := context.Background()
	var name string
	for _, tr := range []Transport{TransportSocket, TransportTCP} {
		p := newProvider(b, func(c *Config) { c.Transport = tr })
		sb, c := create(b, p, manage.SandboxConfig{})
		name = containerName(sb.ID)
		b.Run("envd-"+string(tr), func(b *testing.B) {
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
	}
	b.Run("engine-exec", func(b *testing.B) {
		cli := dockertest.Engine(b)
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			ex, err := cli.ContainerExecCreate(ctx, name, container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
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
	b.Run("docker-exec", func(b *testing.B) {
		timeCommand(b, dockerCLI(b), "exec", name, "true")
	})
}

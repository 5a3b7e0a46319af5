//go:build linux

package managetest

import (
	"context"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// BenchCreateToFirstRun is the body of a provider's
// BenchmarkCreateToFirstRun: a cold Create of p, then the first Run of
// `true` through the envd client at p's Endpoint, what a first tool call
// waits for. Kill is outside the timer. It reports the percentiles of the
// whole, of Create alone ("create-"), and of client and first Run ("run-").
func BenchCreateToFirstRun(b *testing.B, p manage.Provider) {
	ctx := context.Background()
	var samples, creates, runs []time.Duration
	for b.Loop() {
		start := time.Now()
		sb, err := p.Create(ctx, manage.SandboxConfig{})
		if err != nil {
			b.Fatal(err)
		}
		created := time.Now()
		ep, err := p.Endpoint(ctx, sb.ID)
		if err != nil {
			b.Fatal(err)
		}
		c, err := envdclient.New(ep.URL, append([]envdclient.Option{envdclient.WithEnvdVersion(ep.EnvdVersion), envdclient.WithAccessToken(ep.AccessToken)}, ep.ClientOptions...)...)
		if err != nil {
			b.Fatal(err)
		}
		res, err := c.Run(ctx, envdclient.Command{Cmd: "true"}, envdclient.RunOptions{})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run true: %+v, %v", res, err)
		}
		samples = append(samples, time.Since(start))
		creates, runs = append(creates, created.Sub(start)), append(runs, time.Since(created))
		b.StopTimer()
		c.Close()
		if err := p.Kill(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	envdtest.ReportPercentiles(b, samples)
	envdtest.ReportPercentilesOf(b, "create", creates)
	envdtest.ReportPercentilesOf(b, "run", runs)
}

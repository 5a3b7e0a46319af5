//go:build linux

package local

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// BenchmarkCreateToFirstRun measures a cold Create and the first Run of
// `true` through the envd client: what a first tool call waits for. Kill is
// outside the timer. bwrap and none run the lean envd (what sandbox-mcp
// embeds); bwrap-full runs the sandbox-mcp binary's `envd` subcommand, the
// fallback of a binary built without the embedded envd.
func BenchmarkCreateToFirstRun(b *testing.B) {
	for _, variant := range []string{IsolationBwrap, "bwrap-no-disk", IsolationNone, "bwrap-full"} {
		b.Run(variant, func(b *testing.B) {
			var p *Provider
			switch variant {
			case IsolationBwrap:
				p = needBwrap(b, Config{})
			case "bwrap-no-disk":
				// The cost of the disk image (mkfs, mount) is the
				// difference to bwrap.
				p = needBwrap(b, Config{Disk: -1})
			case IsolationNone:
				p = newProvider(b, Config{Isolation: IsolationNone})
			default:
				p = needBwrap(b, Config{EnvdBinary: serverBinary})
			}
			managetest.BenchCreateToFirstRun(b, p)
		})
	}
}

// BenchmarkPauseResume measures one Pause and one Resume of a running
// sandbox: with the cgroup freezer, and with SIGSTOP through the process
// tree (cgroups off).
func BenchmarkPauseResume(b *testing.B) {
	for _, mode := range []string{"freezer", "sigstop"} {
		b.Run(mode, func(b *testing.B) {
			cfg := Config{}
			if mode == "sigstop" {
				cfg.Cgroups = CgroupsOff
			}
			p := needBwrap(b, cfg)
			if mode == "freezer" && !p.Capabilities().Freezer {
				testenv.Missing(b, "a cgroup freezer (%s): run the tests as root, or in a delegated cgroup v2 subtree; sandbox-mcp doctor names the fix", p.Capabilities().CgroupError)
			}
			sb := create(b, p, manage.SandboxConfig{})
			ctx := context.Background()
			var samples []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := p.Pause(ctx, sb.ID); err != nil {
					b.Fatal(err)
				}
				if err := p.Resume(ctx, sb.ID); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
			}
			envdtest.ReportPercentiles(b, samples)
		})
	}
}

// BenchmarkBwrapTrue is the baseline of the bwrap part of a Create: bwrap
// with a sandbox's namespaces and system mounts running /bin/true, as the
// user the provider runs bwrap as.
func BenchmarkBwrapTrue(b *testing.B) {
	p := needBwrap(b, Config{})
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	args := namespaceArgs("bench", false)
	args = append(args, p.sysMounts...)
	args = append(args, procDevArgs...)
	args = append(args, truePath)
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		cmd := exec.Command(p.bwrapPath, args...)
		cmd.Env = []string{}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("bwrap: %v: %s", err, out)
		}
		samples = append(samples, time.Since(start))
	}
	envdtest.ReportPercentiles(b, samples)
}

// BenchmarkExecTrue is the baseline of starting any process: os/exec of
// /bin/true.
func BenchmarkExecTrue(b *testing.B) {
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := exec.Command(truePath).Run(); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	envdtest.ReportPercentiles(b, samples)
}

// BenchmarkCheckSocketPath is what the envd client adds to each new
// connection to a sandbox's socket (not to each call: connections are
// reused): one stat and four lstats (checkSocketPath).
func BenchmarkCheckSocketPath(b *testing.B) {
	p := newProvider(b, Config{Isolation: IsolationNone})
	sb := create(b, p, manage.SandboxConfig{})
	path := socketPath(filepath.Join(p.sandboxesDir, sb.ID))
	for b.Loop() {
		if err := p.checkSocketPath(path); err != nil {
			b.Fatal(err)
		}
	}
}

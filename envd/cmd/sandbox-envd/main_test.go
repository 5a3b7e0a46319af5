//go:build linux

package main_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

const module = "github.com/sandbox-mcp/sandbox-mcp"

// TestLinksNoMCPStack checks what the lean binary links: nothing of the MCP
// stack (mcp-go and the JSON-schema libraries whose package init envd would
// pay for at every sandbox start), none of the project's packages outside
// envd/, proto/ and the standard-library-only leaves internal/cmdline (the
// command-line conventions every sandbox-mcp command shares) and
// internal/netcopy (the connection copy envd's proxy forwarder shares with
// the host's egress proxy), and no test helpers.
func TestLinksNoMCPStack(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", envdtest.LeanPackage).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{"github.com/mark3labs/mcp-go", "github.com/santhosh-tekuri/jsonschema", "github.com/google/jsonschema-go",
		"github.com/invopop/jsonschema", "go.etcd.io/bbolt", "github.com/lmittmann/tint"}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("the lean envd links %s", dep)
			}
		}
		if rest, ok := strings.CutPrefix(dep, module+"/"); ok &&
			!strings.HasPrefix(rest, "envd/") && !strings.HasPrefix(rest, "proto/") && rest != "internal/cmdline" && rest != "internal/netcopy" {
			t.Errorf("the lean envd links %s, outside envd/, proto/, internal/cmdline and internal/netcopy", dep)
		}
		if dep == "testing" || strings.HasSuffix(dep, "/envdtest") {
			t.Errorf("the lean envd links the test helper %s", dep)
		}
	}
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
}

// daemonProcess is a started envd child and its socket.
type daemonProcess struct {
	cmd    *exec.Cmd
	socket string
	stderr *strings.Builder
}

// spawn runs bin with args (the socket and root are appended unless the
// caller names them in env), waits for its ready line on fd 3 and returns
// it. The child is killed when the test ends.
func spawn(t testing.TB, bin string, env []string, args ...string) (*daemonProcess, string) {
	t.Helper()
	dir := envdtest.ShortTempDir(t)
	sock := filepath.Join(dir, "s")
	args = append(args, "--listen", "unix:"+sock, "--ready-fd", "3")
	if env == nil {
		args = append(args, "--root", dir)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(bin, args...)
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Env = append(env, "PATH="+os.Getenv("PATH"))
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("no ready line (%q, %v): %s", line, err, stderr)
	}
	return &daemonProcess{cmd: cmd, socket: sock, stderr: stderr}, line
}

// health asks the daemon's GET /health and returns the status.
func (p *daemonProcess) health(t *testing.T) int {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", p.socket)
	}}}
	defer hc.CloseIdleConnections()
	res, err := hc.Get("http://envd/health")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if v := res.Header.Get("X-Envd-Version"); v != daemon.Version {
		t.Errorf("X-Envd-Version %q, want %q", v, daemon.Version)
	}
	return res.StatusCode
}

// TestServes runs the lean binary the ways the local provider and a person
// do: with the leading "envd" of `sandbox-mcp envd`, without it, and with
// its flags from SANDBOX_MCP_* variables.
func TestServes(t *testing.T) {
	bin := envdtest.LeanBinary(t)
	cases := []struct {
		name string
		env  []string
		args []string
	}{
		{name: "envd subcommand", args: []string{"envd"}},
		{name: "flags only"},
		{name: "environment", env: []string{"SANDBOX_MCP_ROOT=" + t.TempDir(), "SANDBOX_MCP_LOG_LEVEL=debug"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, line := spawn(t, bin, tc.env, tc.args...)
			if line != "ready "+p.socket+"\n" {
				t.Errorf("ready line %q", line)
			}
			if code := p.health(t); code != http.StatusNoContent {
				t.Errorf("GET /health: %d", code)
			}
			// An interrupt shuts it down cleanly.
			if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			if err := p.cmd.Wait(); err != nil {
				t.Errorf("after SIGINT: %v: %s", err, p.stderr)
			}
		})
	}
}

// TestUsageErrors checks that a bad command line exits 2 with a message.
func TestUsageErrors(t *testing.T) {
	bin := envdtest.LeanBinary(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: []string{"envd"}, want: "--root is required"},
		{args: []string{"--root", "/", "extra"}, want: "unexpected arguments"},
		{args: []string{"--root", "/", "--log-format", "xml"}, want: "--log-format"},
		{args: []string{"--root", "/", "--no-such-flag"}, want: "no-such-flag"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = []string{}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: %v, want exit 2 saying %q: %s", tc.args, err, tc.want, out)
		}
	}
}

// BenchmarkSpawnReady measures envd start-up as a sandbox pays it: fork and
// exec of the binary until its "ready" line arrives on --ready-fd, for the
// lean binary and for the full sandbox-mcp binary's envd subcommand (the
// fallback), in the same run. Stopping the daemon is outside the timer.
func BenchmarkSpawnReady(b *testing.B) {
	for _, kind := range []string{"lean", "full"} {
		b.Run(kind, func(b *testing.B) {
			bin := envdtest.LeanBinary(b)
			if kind == "full" {
				bin = envdtest.Binary(b)
			}
			dir := envdtest.ShortTempDir(b)
			sock := filepath.Join(dir, "s")
			var samples []time.Duration
			for b.Loop() {
				pr, pw, err := os.Pipe()
				if err != nil {
					b.Fatal(err)
				}
				cmd := exec.Command(bin, "envd", "--listen", "unix:"+sock, "--root", dir, "--ready-fd", "3")
				cmd.ExtraFiles = []*os.File{pw}
				cmd.Env = []string{}
				start := time.Now()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				pw.Close()
				line, err := bufio.NewReader(pr).ReadString('\n')
				elapsed := time.Since(start)
				pr.Close()
				if err != nil || !strings.HasPrefix(line, "ready ") {
					b.Fatalf("no ready line (%q, %v)", line, err)
				}
				samples = append(samples, elapsed)
				b.StopTimer()
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				b.StartTimer()
			}
			envdtest.ReportPercentiles(b, samples)
		})
	}
}

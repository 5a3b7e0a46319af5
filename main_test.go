//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// newcomer runs the built binary in a fresh directory with its own state
// dir, as someone following the README would.
type newcomer struct {
	t   *testing.T
	bin string
	dir string
	env []string
}

func newNewcomer(t *testing.T) *newcomer {
	t.Helper()
	bin := envdtest.Binary(t)
	dir := envdtest.ShortTempDir(t)
	if err := os.Symlink(bin, filepath.Join(dir, "sandbox-mcp")); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	// Named workspaces' sandboxes outlive the servers that used them.
	t.Cleanup(func() { killSandboxes(t, state) })
	env := append(os.Environ(), "SANDBOX_MCP_STATE_DIR="+state, "SANDBOX_MCP_LOG_LEVEL=warn")
	return &newcomer{t: t, bin: bin, dir: dir, env: env}
}

// run runs a shell command line in the newcomer's directory and returns
// stdout, stderr and the exit status.
func (n *newcomer) run(line string, stdin io.Reader) (string, string, int) {
	n.t.Helper()
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir, cmd.Env, cmd.Stdin = n.dir, n.env, stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("%s: %v", line, err)
	}
	return out.String(), errb.String(), code
}

func (n *newcomer) mustRun(line string) string {
	n.t.Helper()
	out, errs, code := n.run(line, nil)
	if code != 0 {
		n.t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", line, code, out, errs)
	}
	return out
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// runLongRunning starts cmd with --ready-fd 3 appended, waits for the ready
// line, calls check, then stops it with SIGTERM and expects a clean exit.
func runLongRunning(t *testing.T, n *newcomer, cmd string, check func(ready string)) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	script := "exec " + cmd
	if strings.Contains(cmd, "&& ./sandbox-mcp") {
		script = strings.Replace(cmd, "&& ./sandbox-mcp", "&& exec ./sandbox-mcp", 1)
	}
	c := exec.Command("bash", "-c", script+" --ready-fd 3")
	c.Dir, c.Env = n.dir, n.env
	c.ExtraFiles = []*os.File{pw}
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	line, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if err != nil {
		_ = c.Process.Kill()
		_ = c.Wait()
		t.Fatalf("%s did not become ready: %v\n%s", cmd, err, errb.String())
	}
	defer func() {
		_ = c.Process.Signal(syscall.SIGTERM)
		if err := c.Wait(); err != nil {
			t.Errorf("%s did not stop cleanly on SIGTERM: %v\n%s", cmd, err, errb.String())
		}
	}()
	check(strings.TrimSpace(strings.TrimPrefix(line, "ready ")))
}

// initialize starts c and initializes the session (revision 2025-11-25).
func initialize(t testing.TB, ctx context.Context, c *mcpclient.Client) {
	t.Helper()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	init.Params.ClientInfo = mcp.Implementation{Name: "sandbox-mcp-test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
}

func callTool(t *testing.T, ctx context.Context, c *mcpclient.Client, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func textOf(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := mcp.AsTextContent(c); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// mcpTransportOptions sends the bearer token through hc (which trusts the
// test's self-signed certificate).
func mcpTransportOptions(token string, hc *http.Client) []transport.StreamableHTTPCOption {
	return []transport.StreamableHTTPCOption{
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}),
		transport.WithHTTPBasicClient(hc),
	}
}

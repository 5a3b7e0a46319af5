//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// TestREADMEToolTable fails when the README's tool table drifts from the
// registry.
func TestREADMEToolTable(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	begin := strings.Index(s, "<!-- tools:begin")
	end := strings.Index(s, "<!-- tools:end -->")
	if begin < 0 || end < begin {
		t.Fatal("README has no tools:begin/tools:end markers")
	}
	got := s[strings.Index(s[begin:], "\n")+begin+1 : end]
	want := tools.MarkdownTable(tools.All(tools.NewDeps(nil, tools.DefaultConfig(), nil)))
	if got != want {
		t.Fatalf("README tool table drifted from the registry; replace it with the output of `sandbox-mcp tools --markdown`:\n%s", want)
	}
}

// readmeCommands returns the command lines of the README's sh blocks.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in && strings.TrimSpace(line) != "":
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// TestREADMECommands runs every command of the README's sh blocks as a
// newcomer would, in order. A command the test does not know fails it, so a
// new command in the README comes with a way to run it.
func TestREADMECommands(t *testing.T) {
	n := newNewcomer(t)
	for _, line := range readmeCommands(t) {
		cmd := line
		if i := strings.Index(cmd, "   #"); i >= 0 {
			cmd = strings.TrimSpace(cmd[:i])
		}
		t.Run(firstWords(cmd), func(t *testing.T) {
			n.t = t
			switch {
			case cmd == "go build -o sandbox-mcp . && ./sandbox-mcp serve":
				// Build as written (in the repository), then serve until EOF.
				build := exec.Command("bash", "-c", "go build -o "+filepath.Join(n.dir, "built")+" .")
				if out, err := build.CombinedOutput(); err != nil {
					t.Fatalf("go build: %v\n%s", err, out)
				}
				// A build as users make it carries none of the test faults.
				if bin, err := os.ReadFile(filepath.Join(n.dir, "built")); err != nil || bytes.Contains(bin, []byte("SANDBOX_MCP_TEST_")) {
					t.Errorf("the binary built as the README says (%v) holds a SANDBOX_MCP_TEST_ hook; they belong behind -tags testhooks", err)
				}
				n.mustRun(strings.Replace(cmd, "go build -o sandbox-mcp . && ", "", 1) + " < /dev/null")
			case cmd == "scripts/test":
				t.Log("not run here: it is the test suite that runs this test (CI runs it as .ci/run)")
			case cmd == "make help":
				out, err := exec.Command("make", "help").CombinedOutput()
				if err != nil || !strings.Contains(string(out), "checkgenerate") {
					t.Fatalf("make help: %v\n%s", err, out)
				}
			case cmd == "make bench":
				t.Log("not run here: it runs scripts/bench, minutes of benchmarks; docs/benchmarks.md is its output")
			case strings.HasPrefix(cmd, "make "):
				t.Log("not run here: scripts/test runs make lint and make checkgenerate (which runs generate), and go test -race (make test)")
			case strings.Contains(cmd, "--provider e2b"):
				t.Log("not run here: it needs an E2B API key (TestE2BWrongKey runs the binary with --provider e2b; e2b_lifecycle_test.go and e2b_serve_test.go run it against manage serve)")
			case strings.HasPrefix(cmd, "./sandbox-mcp serve --http"):
				runHTTPServe(t, n, cmd)
			case strings.HasPrefix(cmd, "./sandbox-mcp manage serve"):
				runLongRunning(t, n, cmd, func(ready string) {
					// Up, and refusing a request without its key.
					resp, err := http.Get(ready + "/v2/sandboxes")
					if err != nil || resp.StatusCode != http.StatusUnauthorized {
						t.Fatalf("manage serve from the README: GET /v2/sandboxes without a key: %v %v", resp, err)
					}
					resp.Body.Close()
				})
			case strings.Contains(cmd, "./sandbox-mcp envd"):
				runLongRunning(t, n, cmd, func(ready string) {
					resp, err := http.Get("http://127.0.0.1:49983/health")
					if err != nil || resp.StatusCode != http.StatusNoContent {
						t.Fatalf("envd from the README: /health %v %v", resp, err)
					}
					resp.Body.Close()
				})
			default:
				n.mustRun(cmd)
			}
		})
	}
}

// TestREADMENotice runs the command the README quotes for its notice
// example and checks that the example shows what the command prints: the
// NOTICE line as is, and the rendered result after it up to the parts the
// README elides with "…".
func TestREADMENotice(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("real one, from `([^`]+)`:\n\n```text\n([^\n]*)\n((?s:.*?))\n```").FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatal("README has no notice example (\"real one, from `COMMAND`:\" and a text block: the NOTICE line, then the result)")
	}
	cmd, notice, result := m[1], m[2], m[3]
	n := newNewcomer(t)
	out, errs, _ := n.run(cmd, nil)
	first, rest, _ := strings.Cut(strings.TrimRight(out, "\n"), "\n")
	if first != notice {
		t.Errorf("the README's NOTICE line differs from what %s prints:\nREADME: %s\nprints: %s", cmd, notice, first)
	}
	printed := rest
	for _, piece := range strings.Split(result, "…") {
		i := strings.Index(rest, piece)
		if i < 0 {
			t.Errorf("the README's result has %q where %s prints:\n%s%s", piece, cmd, printed, errs)
			break
		}
		rest = rest[i+len(piece):]
	}
	if !strings.HasSuffix(result, "…") && rest != "" {
		t.Errorf("%s prints %q after what the README shows", cmd, rest)
	}
}

func firstWords(s string) string {
	f := strings.Fields(s)
	if len(f) > 3 {
		f = f[:3]
	}
	return strings.Join(f, "_")
}

func runHTTPServe(t *testing.T, n *newcomer, cmd string) {
	runLongRunning(t, n, cmd, func(url string) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		base := strings.TrimSuffix(url, "/mcp")
		if strings.Contains(cmd, "0.0.0.0") {
			base = strings.Replace(base, "0.0.0.0", "127.0.0.1", 1)
			base = strings.Replace(base, "[::]", "127.0.0.1", 1)
		}
		resp, err := hc.Get(base + "/healthz")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz: %v %v", resp, err)
		}
		resp.Body.Close()
		// Without the token: 401; with it, an MCP session works. Without
		// --auth-tokens-file the server generated the token.
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(`{}`))
		resp, err = hc.Do(req)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("/mcp without a token: %v %v", resp, err)
		}
		resp.Body.Close()
		var token string
		if strings.Contains(cmd, "--auth-tokens-file") {
			raw, err := os.ReadFile(filepath.Join(n.dir, "tokens.txt"))
			if err != nil {
				t.Fatal(err)
			}
			token = strings.Fields(string(raw))[0]
		} else {
			token = n.httpToken()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := mcpclient.NewStreamableHttpClient(base+"/mcp", mcpTransportOptions(token, hc)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		initialize(t, ctx, c)
		res := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "echo over-http"})
		if res.IsError || !strings.Contains(textOf(res), "over-http") {
			t.Fatalf("workspace_exec over %s: %s", base, textOf(res))
		}
	})
}

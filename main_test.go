package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
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
	env := append(os.Environ(), "SANDBOX_MCP_STATE_DIR="+filepath.Join(dir, "state"), "SANDBOX_MCP_LOG_LEVEL=warn")
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

func TestToolsJSON(t *testing.T) {
	n := newNewcomer(t)
	var descs []tools.Description
	if err := json.Unmarshal([]byte(n.mustRun("./sandbox-mcp tools --json")), &descs); err != nil {
		t.Fatal(err)
	}
	if len(descs) != 12 {
		t.Fatalf("%d tools, want 12", len(descs))
	}
	for _, d := range descs {
		if d.Name == "" || d.Title == "" || d.Toolset == "" || d.Description == "" || len(d.InputSchema) == 0 || len(d.OutputSchema) == 0 {
			t.Errorf("incomplete description: %+v", d)
		}
	}
	ro := n.mustRun("./sandbox-mcp tools --json --read-only")
	if strings.Contains(ro, `"workspace_exec"`) || !strings.Contains(ro, `"read_files"`) {
		t.Errorf("--read-only listing is wrong: %.300s", ro)
	}
	text := n.mustRun("./sandbox-mcp tools")
	for _, want := range []string{"workspace_exec", "input schema:", "output schema:", "server instructions:", "NOTICE"} {
		if !strings.Contains(text, want) {
			t.Errorf("tools output lacks %q", want)
		}
	}
}

func TestCall(t *testing.T) {
	n := newNewcomer(t)
	out := n.mustRun(`./sandbox-mcp call workspace_exec '{"command": "echo hello; exit 3"}'`)
	var res struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil || res.ExitCode != 3 || res.Stdout != "hello\n" {
		t.Fatalf("call output %q: %+v %v", out, res, err)
	}
	// An isError result exits 1 and prints the message.
	out, _, code := n.run(`./sandbox-mcp call read_files '{"paths": ["missing.txt"]}'`, nil)
	if code != 1 || !strings.Contains(out, "missing.txt") {
		t.Fatalf("isError call: exit %d, output %q", code, out)
	}
	// --json prints the whole result.
	out = n.mustRun(`./sandbox-mcp call --json workspace_info`)
	var whole struct {
		StructuredContent map[string]any `json:"structuredContent"`
		IsError           bool           `json:"isError"`
	}
	if err := json.Unmarshal([]byte(out), &whole); err != nil || whole.StructuredContent["provider"] != "local" {
		t.Fatalf("--json output %q: %v", out, err)
	}
	// Arguments from a file and from stdin.
	if err := os.WriteFile(filepath.Join(n.dir, "args.json"), []byte(`{"command":"echo from-file"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := n.mustRun(`./sandbox-mcp call workspace_exec @args.json`); !strings.Contains(out, "from-file") {
		t.Errorf("@file: %q", out)
	}
	if out, _, code := n.run(`./sandbox-mcp call workspace_exec -`, strings.NewReader(`{"command":"echo from-stdin"}`)); code != 0 || !strings.Contains(out, "from-stdin") {
		t.Errorf("stdin args: exit %d %q", code, out)
	}
}

func TestCallBadInput(t *testing.T) {
	n := newNewcomer(t)
	cases := []struct {
		line string
		want []string
	}{
		{`./sandbox-mcp call workspace_exec '{"command": '`, []string{"JSON", `"command"`}},
		{`./sandbox-mcp call no_such_tool`, []string{"unknown tool", "workspace_exec"}},
		{`./sandbox-mcp call workspace_exec '{}'`, []string{"command", "input schema"}},
		{`./sandbox-mcp call put_files '{"files": [{"path": "a", "content": "!!", "encoding": "base64"}]}'`, []string{"files[0].content"}},
		{`./sandbox-mcp call`, []string{"usage"}},
	}
	for _, tc := range cases {
		out, errs, code := n.run(tc.line, nil)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s%s", tc.line, code, out, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(out+errs, w) {
				t.Errorf("%s: output lacks %q:\n%s%s", tc.line, w, out, errs)
			}
		}
	}
}

func TestCallSequenceInNamedWorkspace(t *testing.T) {
	n := newNewcomer(t)
	n.mustRun(`./sandbox-mcp call --workspace demo put_files '{"files": [{"path": "hello.py", "content": "print(\"hello from the sandbox\")"}]}'`)
	out := n.mustRun(`./sandbox-mcp call --workspace demo workspace_exec '{"command": "cat hello.py"}'`)
	if !strings.Contains(out, `print(\"hello from the sandbox\")`) || !strings.Contains(out, "restarted from its saved files") {
		t.Fatalf("second call of the sequence: %q", out)
	}
	// Another workspace does not see the file.
	out, _, _ = n.run(`./sandbox-mcp call --workspace other workspace_exec '{"command": "ls hello.py"}'`, nil)
	if !strings.Contains(out, `"exit_code":2`) {
		t.Fatalf("another workspace saw the file: %q", out)
	}
}

func TestDoctor(t *testing.T) {
	n := newNewcomer(t)
	out, errs, code := n.run("./sandbox-mcp doctor", nil)
	if code != 0 || !strings.Contains(out, "isolation (bubblewrap)") || !strings.Contains(out, "state directory") {
		t.Fatalf("doctor: exit %d\n%s%s", code, out, errs)
	}
	// A half-configured machine: an impossible state dir fails, never crashes.
	out, errs, code = n.run("./sandbox-mcp doctor --json --state-dir /proc/no/such/dir", nil)
	var rep struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Name, Status, Fix string
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.OK {
		t.Fatalf("doctor with a bad state dir: exit %d, %v\n%s%s", code, err, out, errs)
	}
	for _, c := range rep.Checks {
		if c.Status == "fail" && c.Fix == "" {
			t.Errorf("failing check %s has no fix", c.Name)
		}
	}
	// A provider this version does not have fails.
	if _, _, code := n.run("./sandbox-mcp doctor --provider e2b", nil); code != 1 {
		t.Errorf("doctor --provider e2b: exit %d, want 1", code)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

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
			case strings.HasPrefix(cmd, "./sandbox-mcp serve --http"):
				runHTTPServe(t, n, cmd)
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
// NOTICE line as is, and the JSON line up to the parts the README elides
// with "…".
func TestREADMENotice(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("real one, from `([^`]+)`:\n\n```text\n([^\n]*)\n([^\n]*)\n```").FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatal("README has no notice example (\"real one, from `COMMAND`:\" and a text block of two lines)")
	}
	cmd, notice, result := m[1], m[2], m[3]
	n := newNewcomer(t)
	out, errs, _ := n.run(cmd, nil)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%s printed %d lines, the README shows 2:\n%s%s", cmd, len(lines), out, errs)
	}
	if lines[0] != notice {
		t.Errorf("the README's NOTICE line differs from what %s prints:\nREADME: %s\nprints: %s", cmd, notice, lines[0])
	}
	rest := lines[1]
	for _, piece := range strings.Split(result, "…") {
		piece = strings.TrimSpace(piece)
		i := strings.Index(rest, piece)
		if i < 0 {
			t.Errorf("the README's result line has %q where %s prints:\n%s", piece, cmd, lines[1])
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
		if !strings.Contains(cmd, "--auth-tokens-file") {
			return
		}
		// Without the token: 401; with it, an MCP session works.
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(`{}`))
		resp, err = hc.Do(req)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("/mcp without a token: %v %v", resp, err)
		}
		resp.Body.Close()
		raw, err := os.ReadFile(filepath.Join(n.dir, "tokens.txt"))
		if err != nil {
			t.Fatal(err)
		}
		token := strings.Fields(string(raw))[0]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := mcpclient.NewStreamableHttpClient(base+"/mcp", mcpTransportOptions(token, hc)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		initialize(t, ctx, c)
		res := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "echo over-https"})
		if res.IsError || !strings.Contains(textOf(res), "over-https") {
			t.Fatalf("workspace_exec over HTTPS: %s", textOf(res))
		}
	})
}

func initialize(t *testing.T, ctx context.Context, c *mcpclient.Client) {
	t.Helper()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	init.Params.ClientInfo = mcp.Implementation{Name: "readme-test", Version: "0"}
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

// stdioClient starts the built binary's serve command and connects the
// mcp-go stdio client to it.
func stdioClient(t testing.TB, extra ...string) *mcpclient.Client {
	t.Helper()
	bin := envdtest.Binary(t)
	state := filepath.Join(envdtest.ShortTempDir(t), "state")
	args := append([]string{"serve", "--state-dir", state, "--log-level", "warn"}, extra...)
	c, err := mcpclient.NewStdioMCPClient(bin, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	init.Params.ClientInfo = mcp.Implementation{Name: "stdio-test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStdioBinaryTools drives every tool's main path and a main error path
// through the built binary over stdio with the mcp-go client.
func TestStdioBinaryTools(t *testing.T) {
	exerciseTools(t, stdioClient(t))
}

// TestHTTPBinaryTools does the same over streamable HTTP, with a client of
// revision 2025-11-25 (a session) and one of 2026-07-28 (stateless, picking
// its workspace with the Sandbox-Workspace header).
func TestHTTPBinaryTools(t *testing.T) {
	n := newNewcomer(t)
	runLongRunning(t, n, "./sandbox-mcp serve --http 127.0.0.1:0", func(url string) {
		for _, tc := range []struct {
			name string
			opts []mcpclient.ClientOption
			hdr  map[string]string
		}{
			{"2025-11-25", []mcpclient.ClientOption{mcpclient.WithProtocolVersion(mcp.ProtocolVersion20251125)}, nil},
			{"2026-07-28", nil, map[string]string{"Sandbox-Workspace": "stateless-test"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(tc.hdr))
				if err != nil {
					t.Fatal(err)
				}
				c := mcpclient.NewClient(tr, tc.opts...)
				t.Cleanup(func() { c.Close() })
				if err := c.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				init := mcp.InitializeRequest{}
				init.Params.ClientInfo = mcp.Implementation{Name: "http-test", Version: "0"}
				if tc.name == "2025-11-25" {
					init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
				}
				res, err := c.Initialize(t.Context(), init)
				if err != nil {
					t.Fatal(err)
				}
				if res.ProtocolVersion != tc.name {
					t.Fatalf("negotiated %s, want %s", res.ProtocolVersion, tc.name)
				}
				exerciseTools(t, c)
			})
		}
	})
}

// exerciseTools calls every tool's main path and a main error path.
func exerciseTools(t *testing.T, c *mcpclient.Client) {
	t.Helper()
	ctx := t.Context()
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil || len(list.Tools) != 12 {
		t.Fatalf("ListTools: %d tools, %v", len(list.Tools), err)
	}
	structured := func(res *mcp.CallToolResult) map[string]any {
		t.Helper()
		raw, _ := json.Marshal(res.StructuredContent)
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("structuredContent %s: %v", raw, err)
		}
		return m
	}
	ok := func(name string, args map[string]any) map[string]any {
		t.Helper()
		res := callTool(t, ctx, c, name, args)
		if res.IsError {
			t.Fatalf("%s(%v): %s", name, args, textOf(res))
		}
		return structured(res)
	}
	fail := func(name string, args map[string]any, want string) {
		t.Helper()
		res := callTool(t, ctx, c, name, args)
		if !res.IsError || !strings.Contains(textOf(res), want) {
			t.Fatalf("%s(%v): isError=%v %q; want an error mentioning %q", name, args, res.IsError, textOf(res), want)
		}
	}
	ok("put_files", map[string]any{"files": []any{map[string]any{"path": "src/a.txt", "content": "alpha\n"}}})
	fail("put_files", map[string]any{"files": []any{map[string]any{"path": "../escape", "content": "x"}}}, "leaves the workspace")
	// The file's text comes in a content block of its own, which the entry
	// names.
	if res := callTool(t, ctx, c, "read_files", map[string]any{"paths": []any{"src/a.txt"}}); res.IsError || len(res.Content) != 2 ||
		!strings.Contains(fmt.Sprint(structured(res)["files"]), "content_index:1") || res.Content[1].(mcp.TextContent).Text != "alpha\n" {
		t.Fatalf("read_files: %s", textOf(res))
	}
	fail("read_files", map[string]any{"paths": []any{"/etc/passwd"}}, "outside the workspace")
	if got := ok("list_files", map[string]any{"path": "src"}); !strings.Contains(fmt.Sprint(got["entries"]), "a.txt") {
		t.Fatalf("list_files: %v", got)
	}
	fail("list_files", map[string]any{"path": "nope"}, "nope")
	if got := ok("workspace_exec", map[string]any{"command": "cat src/a.txt; exit 4"}); got["exit_code"] != float64(4) || got["stdout"] != "alpha\n" {
		t.Fatalf("workspace_exec: %v", got)
	}
	fail("workspace_exec", map[string]any{"command": "true", "cwd": "missing-dir"}, "missing-dir")
	bg := ok("workspace_exec", map[string]any{"command": "read x; echo got $x", "background": true})
	proc, _ := bg["process"].(string)
	if proc == "" {
		t.Fatalf("background start: %v", bg)
	}
	if got := ok("process_list", map[string]any{}); !strings.Contains(fmt.Sprint(got["processes"]), proc) {
		t.Fatalf("process_list: %v", got)
	}
	ok("process_input", map[string]any{"process": proc, "data": "hi\n", "close": true})
	out := ok("process_output", map[string]any{"process": proc, "wait_sec": 30})
	for out["status"] == "running" {
		out = ok("process_output", map[string]any{"process": proc, "wait_sec": 30})
	}
	if !strings.Contains(fmt.Sprint(out["output"]), "got hi") {
		t.Fatalf("process_output: %v", out)
	}
	ok("process_signal", map[string]any{"process": proc})
	fail("process_output", map[string]any{"process": "g1-p999999"}, "999999")
	fail("process_signal", map[string]any{"process": "not-a-handle"}, "not-a-handle")
	fail("process_input", map[string]any{"process": "g1-p999999", "data": "x"}, "999999")
	fail("stage_inputs", map[string]any{"inputs": []any{map[string]any{"from": "host://nope/x"}}}, "nope")
	ok("stage_inputs", map[string]any{"inputs": []any{map[string]any{"from": "workspace://src/a.txt", "to": "copy.txt"}}})
	if got := ok("collect_outputs", map[string]any{"globs": []any{"src/*.txt"}}); !strings.Contains(fmt.Sprint(got["artifacts"]), "artifact://") {
		t.Fatalf("collect_outputs: %v", got)
	}
	fail("collect_outputs", map[string]any{"globs": []any{"../x"}}, "../x")
	info := ok("workspace_info", map[string]any{})
	fail("workspace_reset", map[string]any{"confirm": false}, "confirm")
	reset := ok("workspace_reset", map[string]any{"confirm": true})
	if reset["generation"].(float64) != info["generation"].(float64)+1 {
		t.Fatalf("reset: %v after %v", reset, info)
	}
	// Unknown tool: a JSON-RPC error, and the server keeps serving.
	req := mcp.CallToolRequest{}
	req.Params.Name = "no_such_tool"
	if _, err := c.CallTool(ctx, req); err == nil {
		t.Fatal("unknown tool did not give a JSON-RPC error")
	}
	ok("workspace_info", map[string]any{})
}

// TestStdioProgressAndCancel: a client that sent a progress token receives
// progress during a 3 s command.
func TestStdioProgress(t *testing.T) {
	c := stdioClient(t)
	var mu sync.Mutex
	var progress []mcp.JSONRPCNotification
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == string(mcp.MethodNotificationProgress) {
			mu.Lock()
			progress = append(progress, n)
			mu.Unlock()
		}
	})
	req := mcp.CallToolRequest{}
	req.Params.Name = "workspace_exec"
	req.Params.Arguments = map[string]any{"command": "sleep 3; echo done"}
	req.Params.Meta = &mcp.Meta{ProgressToken: "p1"}
	res, err := c.CallTool(t.Context(), req)
	if err != nil || res.IsError {
		t.Fatalf("%v %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) < 2 {
		t.Fatalf("%d progress notifications during a 3 s command; want about one a second", len(progress))
	}
	var last float64
	for _, n := range progress {
		p, _ := n.Params.AdditionalFields["progress"].(float64)
		if p <= last {
			t.Fatalf("progress did not increase: %v", progress)
		}
		last = p
	}
}

// BenchmarkStdioBinaryExecTrue is workspace_exec of `true` through the
// built binary over stdio, local bwrap sandbox.
func BenchmarkStdioBinaryExecTrue(b *testing.B) {
	c := stdioClient(b)
	req := mcp.CallToolRequest{}
	req.Params.Name = "workspace_exec"
	req.Params.Arguments = map[string]any{"argv": []any{"true"}}
	if _, err := c.CallTool(b.Context(), req); err != nil {
		b.Fatal(err)
	}
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		res, err := c.CallTool(b.Context(), req)
		if err != nil || res.IsError {
			b.Fatal(res, err)
		}
		ds = append(ds, time.Since(t0))
	}
	envdtest.ReportPercentiles(b, ds)
}

// BenchmarkServerRSS reports the server process's peak RSS after a command
// that writes 64 MiB and one that writes 256 MiB of stdout, next to its
// peak RSS after `true`: the server's memory does not grow with output
// size.
func BenchmarkServerRSS(b *testing.B) {
	for _, tc := range []struct {
		name, command string
	}{{"true", "true"}, {"64MiB", "head -c 67108864 /dev/zero"}, {"256MiB", "head -c 268435456 /dev/zero"}} {
		b.Run(tc.name, func(b *testing.B) {
			var peak int64
			for b.Loop() {
				bin := envdtest.Binary(b)
				state := filepath.Join(envdtest.ShortTempDir(b), "state")
				cmd := exec.Command(bin, "serve", "--state-dir", state, "--log-level", "warn")
				stdin, _ := cmd.StdinPipe()
				stdout, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				r := bufio.NewReader(stdout)
				send := func(msg string) string {
					fmt.Fprintln(stdin, msg)
					line, err := r.ReadString('\n')
					if err != nil {
						b.Fatal(err)
					}
					return line
				}
				send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}`)
				fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
				args, _ := json.Marshal(map[string]any{"command": tc.command})
				if line := send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"workspace_exec","arguments":` + string(args) + `}}`); !strings.Contains(line, `exit_code`) {
					b.Fatalf("call: %s", line)
				}
				rss, err := envdtest.PeakRSS(cmd.Process.Pid)
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, rss)
				stdin.Close()
				_ = cmd.Wait()
			}
			b.ReportMetric(float64(peak)/(1<<20), "server-peak-MiB")
		})
	}
}

func TestByteSizes(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "32KiB": 32 << 10, "1MiB": 1 << 20, "2GiB": 2 << 30, "64MB": 64e6, "1kB": 1000, "7B": 7} {
		got, err := parseBytes(in)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "12XB", "1.5MiB", "MiB",
		// Overflow int64 once multiplied.
		"9223372036854775807KiB", "8589934592GiB", "9223372036854775808"} {
		if n, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", bad, n)
		}
	}
	// The largest sizes that fit.
	for in, want := range map[string]int64{"9223372036854775807": math.MaxInt64, "8589934591GiB": 8589934591 << 30, "9223372036854775KB": 9223372036854775000} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

func TestWorkspaceFlag(t *testing.T) {
	for name, ok := range map[string]bool{"demo": true, "a.b_c-1": true, ".hidden": true, ".": false, "..": false, "a/b": false, "": true} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o := &serveOptions{}
		o.registerSandboxFlags(fs)
		o.workspace = name
		if err := o.check(); (err == nil) != ok {
			t.Errorf("--workspace %q: check() = %v", name, err)
		} else if err != nil && !strings.Contains(err.Error(), "--workspace") {
			t.Errorf("--workspace %q: the error does not name the flag: %v", name, err)
		}
	}
}

func TestIsArgumentError(t *testing.T) {
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.NewTextContent(s)}}
	}
	for s, want := range map[string]bool{
		"invalid argument timeout_sec: got string, want integer.":                                     true,
		"invalid arguments: arguments are not JSON: unexpected EOF.":                                  true,
		"NOTICE: The sandbox was resumed.\n\ninvalid argument cwd: \"x\" is a file, not a directory.": true,
		"workspace_exec failed: open /workspace/x: invalid argument":                                  false,
		"Not found: invalid argument.":                                                                false,
	} {
		if got := isArgumentError(text(s)); got != want {
			t.Errorf("isArgumentError(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestServeReadyFDNotOpen: a --ready-fd that is not open is an error that
// names it, as for envd, not a server nobody hears is ready.
func TestServeReadyFDNotOpen(t *testing.T) {
	n := newNewcomer(t)
	for _, cmd := range []string{"serve --http 127.0.0.1:0", "envd --listen 127.0.0.1:0 --root ."} {
		_, errs, code := n.run("./sandbox-mcp "+cmd+" --ready-fd 9 9>&-", nil)
		if code == 0 || !strings.Contains(errs, "--ready-fd") {
			t.Errorf("%s with a closed --ready-fd: exit %d, stderr %q", cmd, code, errs)
		}
	}
}

func TestEnvironmentFlags(t *testing.T) {
	n := newNewcomer(t)
	n.env = append(n.env, "SANDBOX_MCP_MAX_TIMEOUT=1s")
	out := n.mustRun(`./sandbox-mcp call workspace_exec '{"command": "true", "timeout_sec": 5}'`)
	if !strings.Contains(out, "clamped to the server's ceiling of 1 s") {
		t.Fatalf("SANDBOX_MCP_MAX_TIMEOUT not applied: %q", out)
	}
	_, errs, code := n.run(`SANDBOX_MCP_OUTPUT_LIMIT=lots ./sandbox-mcp call workspace_info`, nil)
	if code != 2 || !strings.Contains(errs, "SANDBOX_MCP_OUTPUT_LIMIT") {
		t.Fatalf("a bad environment value: exit %d %q", code, errs)
	}
}

// mcpTransportOptions sends the bearer token through hc (which trusts the
// test's self-signed certificate).
func mcpTransportOptions(token string, hc *http.Client) []transport.StreamableHTTPCOption {
	return []transport.StreamableHTTPCOption{
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}),
		transport.WithHTTPBasicClient(hc),
	}
}

//go:build linux

package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// execOK runs workspace_exec and decodes its result.
func (h *harness) execOK(args map[string]any) execOutput {
	h.t.Helper()
	var out execOutput
	h.ok("workspace_exec", args, &out)
	return out
}

// sandboxFile reads a workspace file through envd's /files (the real client).
func (h *harness) sandboxFile(rel string) ([]byte, error) {
	h.t.Helper()
	l := h.lease()
	dl, err := l.Client.Download(context.Background(), filepath.Join(l.Sandbox.Workdir, rel))
	if err != nil {
		return nil, err
	}
	defer dl.Close()
	return io.ReadAll(dl)
}

func valueOf[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func hasNotice(notices []string, substr string) bool {
	for _, n := range notices {
		if strings.Contains(n, substr) {
			return true
		}
	}
	return false
}

func TestWorkspaceExecCommandAndArgv(t *testing.T) {
	h := newHarness(t, harnessOptions{})

	out := h.execOK(map[string]any{"command": "echo hello; echo oops >&2; exit 3"})
	if valueOf(out.ExitCode) != 3 || valueOf(out.Stdout) != "hello\n" || valueOf(out.Stderr) != "oops\n" {
		t.Fatalf("command: %+v", out)
	}
	if out.StdoutTruncated || out.StderrTruncated || valueOf(out.StdoutTotalBytes) != 6 || valueOf(out.StderrTotalBytes) != 5 || out.TimedOut {
		t.Fatalf("command: %+v", out)
	}
	if !strings.HasPrefix(out.RunID, "g1-r") || out.Process != "" || out.TimeoutSec != 60 || out.TimeoutClamped {
		t.Fatalf("command: %+v", out)
	}
	if out.FullOutput == nil || out.FullOutput.Stdout != ".sandbox-mcp/runs/"+out.RunID+"/stdout.log" ||
		out.FullOutput.Stderr != ".sandbox-mcp/runs/"+out.RunID+"/stderr.log" {
		t.Fatalf("full_output: %+v", out.FullOutput)
	}
	if got, err := h.sandboxFile(out.FullOutput.Stdout); err != nil || string(got) != "hello\n" {
		t.Fatalf("stdout log: %q %v", got, err)
	}

	// argv runs without a shell: no expansion, spaces kept.
	out = h.execOK(map[string]any{"argv": []string{"printf", "%s|", "a b", "$HOME", "*"}})
	if valueOf(out.ExitCode) != 0 || valueOf(out.Stdout) != "a b|$HOME|*|" {
		t.Fatalf("argv: %+v", out)
	}

	// A death by signal is a result with 128+n and the signal's name.
	out = h.execOK(map[string]any{"command": "kill -KILL $$"})
	if valueOf(out.ExitCode) != 137 || out.Signal != "killed" || out.TimedOut {
		t.Fatalf("signal: %+v", out)
	}

	// An unknown command under the shell is exit 127, not a tool error.
	out = h.execOK(map[string]any{"command": "no-such-command-xyz"})
	if valueOf(out.ExitCode) != 127 || !strings.Contains(valueOf(out.Stderr), "no-such-command-xyz") {
		t.Fatalf("unknown command: %+v", out)
	}
	// Under argv it is an error from envd.
	if msg := h.fail("workspace_exec", map[string]any{"argv": []string{"no-such-command-xyz"}}); !strings.Contains(msg, "not found") {
		t.Fatalf("unknown argv[0]: %s", msg)
	}

	// The command is bash where there is one, not a login shell unless
	// login asks for one.
	probe := `echo "$0"; shopt -q login_shell && echo login`
	out = h.execOK(map[string]any{"command": probe})
	if s := valueOf(out.Stdout); s != "bash\n" && s != "/bin/bash\n" && s != "sh\n" && s != "/bin/sh\n" {
		t.Fatalf("shell: %q", s)
	}
	out = h.execOK(map[string]any{"command": probe, "login": true})
	if s := valueOf(out.Stdout); s != "bash\nlogin\n" && s != "/bin/bash\nlogin\n" && s != "sh\n" && s != "/bin/sh\n" {
		t.Fatalf("login shell: %q", s)
	}
}

func TestWorkspaceExecNoOutputWritesNoLog(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	out := h.execOK(map[string]any{"command": "true"})
	if valueOf(out.ExitCode) != 0 || out.FullOutput != nil || valueOf(out.Stdout) != "" || out.Stdout == nil {
		t.Fatalf("%+v", out)
	}
	if _, err := h.sandboxFile(".sandbox-mcp/runs/" + out.RunID + "/stdout.log"); !envdclient.IsNotFound(err) {
		t.Fatalf("a run without output wrote a log: %v", err)
	}
	// Only the stream that had output gets a log.
	out = h.execOK(map[string]any{"command": "echo only-err >&2"})
	if out.FullOutput == nil || out.FullOutput.Stdout != "" || out.FullOutput.Stderr == "" {
		t.Fatalf("%+v", out.FullOutput)
	}
}

func TestWorkspaceExecCwdEnvStdin(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.execOK(map[string]any{"command": "mkdir -p sub/deep && ln -s sub/deep inner && echo x > file"})
	root := h.lease().Sandbox.Workdir

	out := h.execOK(map[string]any{"command": "pwd", "cwd": "sub/deep"})
	if valueOf(out.Stdout) != filepath.Join(root, "sub/deep")+"\n" {
		t.Fatalf("cwd: %q (root %s)", valueOf(out.Stdout), root)
	}
	out = h.execOK(map[string]any{"argv": []string{"pwd"}})
	if valueOf(out.Stdout) != filepath.Join(root, "sub/deep")+"\n" {
		t.Fatalf("a cwd persists like a cd: %q", valueOf(out.Stdout))
	}
	out = h.execOK(map[string]any{"argv": []string{"pwd"}, "cwd": "."})
	if valueOf(out.Stdout) != root+"\n" {
		t.Fatalf("cwd .: %q", valueOf(out.Stdout))
	}
	out = h.execOK(map[string]any{"command": "pwd -P", "cwd": "inner"})
	if valueOf(out.Stdout) != filepath.Join(root, "sub/deep")+"\n" {
		t.Fatalf("cwd through a symlink inside: %q", valueOf(out.Stdout))
	}

	out = h.execOK(map[string]any{"command": `printf '%s/%s' "$GREETING" "$OTHER"`, "env": []map[string]string{{"name": "GREETING", "value": "hi there"}, {"name": "OTHER", "value": ""}}})
	if valueOf(out.Stdout) != "hi there/" {
		t.Fatalf("env: %q", valueOf(out.Stdout))
	}

	out = h.execOK(map[string]any{"command": "tr a-z A-Z; echo done", "stdin": "line one\nline two"})
	if valueOf(out.Stdout) != "LINE ONE\nLINE TWO"+"done\n" {
		t.Fatalf("stdin: %q", valueOf(out.Stdout))
	}
	// An empty stdin is an immediate EOF; no stdin at all reads nothing too.
	out = h.execOK(map[string]any{"argv": []string{"wc", "-c"}, "stdin": ""})
	if strings.TrimSpace(valueOf(out.Stdout)) != "0" {
		t.Fatalf("empty stdin: %q", valueOf(out.Stdout))
	}
	out = h.execOK(map[string]any{"command": "cat; echo end"})
	if valueOf(out.Stdout) != "end\n" {
		t.Fatalf("no stdin: %q", valueOf(out.Stdout))
	}
}

// TestWorkspaceExecCwdPersists: the shell's last directory is where the
// next command starts, whether the command failed, exited or ran directly;
// variables do not persist; a directory that went away, one outside the
// workspace and a reset start again at the root.
func TestWorkspaceExecCwdPersists(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	root := h.lease().Sandbox.Workdir
	// A shell that ends where it started leaves no cwd file to read.
	out := h.execOK(map[string]any{"command": "cd . && true"})
	if out.Cwd != "." || h.sbExists(".sandbox-mcp/cwd") {
		t.Fatalf("staying at the root: cwd %q, cwd dir written %v", out.Cwd, h.sbExists(".sandbox-mcp/cwd"))
	}
	out = h.execOK(map[string]any{"command": "mkdir -p a/b c && cd a && export FOO=bar"})
	if out.Cwd != "a" {
		t.Fatalf("cwd after cd a: %q", out.Cwd)
	}
	out = h.execOK(map[string]any{"command": `pwd; echo "foo=$FOO"`})
	if valueOf(out.Stdout) != filepath.Join(root, "a")+"\nfoo=\n" || out.Cwd != "a" {
		t.Fatalf("next command: %q in %q", valueOf(out.Stdout), out.Cwd)
	}
	out = h.execOK(map[string]any{"command": "cd b; false"})
	if valueOf(out.ExitCode) != 1 || out.Cwd != "a/b" {
		t.Fatalf("failing command: exit %d, cwd %q", valueOf(out.ExitCode), out.Cwd)
	}
	out = h.execOK(map[string]any{"command": "cd ../../c && exit 3"})
	if valueOf(out.ExitCode) != 3 || out.Cwd != "c" {
		t.Fatalf("exit: exit %d, cwd %q", valueOf(out.ExitCode), out.Cwd)
	}
	out = h.execOK(map[string]any{"command": "/bin/pwd"}) // plain words: runs directly (pwd alone is a builtin, run by the shell)
	if valueOf(out.Stdout) != filepath.Join(root, "c")+"\n" || out.Cwd != "c" {
		t.Fatalf("direct run: %q in %q", valueOf(out.Stdout), out.Cwd)
	}
	mustContain(t, resultText(h.call("workspace_exec", map[string]any{"command": "true"})), "cwd c")

	h.sbRun("rm", "-rf", h.sbPath("c"))
	out = h.execOK(map[string]any{"command": "pwd"})
	if valueOf(out.Stdout) != root+"\n" || out.Cwd != "." || !hasNotice(out.Notices, "no longer a directory") {
		t.Fatalf("removed directory: %q in %q, notices %q", valueOf(out.Stdout), out.Cwd, out.Notices)
	}
	out = h.execOK(map[string]any{"command": "cd /"})
	if !hasNotice(out.Notices, "outside the workspace") {
		t.Fatalf("cd /: notices %q", out.Notices)
	}
	if out = h.execOK(map[string]any{"command": "pwd"}); valueOf(out.Stdout) != root+"\n" {
		t.Fatalf("after cd /: %q", valueOf(out.Stdout))
	}
	h.execOK(map[string]any{"command": "cd a"})
	okAs[workspaceResetOutput](h, "workspace_reset", map[string]any{"confirm": true})
	out = h.execOK(map[string]any{"command": "pwd"})
	if out.Cwd != "." {
		t.Fatalf("after a reset: cwd %q", out.Cwd)
	}
	if h.sbExists(".sandbox-mcp/cwd") {
		entries, _ := h.lease().Client.ListDir(context.Background(), h.sbPath(".sandbox-mcp/cwd"), 1)
		if len(entries) > 0 {
			t.Errorf("cwd files left behind: %v", entries)
		}
	}
}

func TestWorkspaceExecBadInput(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.execOK(map[string]any{"command": "echo x > afile && ln -s /etc outside"})
	cases := []struct {
		name string
		args any
		want string
	}{
		{"nothing", map[string]any{}, "command"},
		{"both", map[string]any{"command": "true", "argv": []string{"true"}}, "not both"},
		{"empty argv", map[string]any{"argv": []string{}}, "argv"},
		{"empty argv0", map[string]any{"argv": []string{""}}, "argv[0]"},
		{"blank command", map[string]any{"command": "   "}, "blank"},
		{"NUL in command", map[string]any{"command": "echo \x00"}, "NUL"},
		{"NUL in argv", map[string]any{"argv": []string{"echo", "a\x00b"}}, "argv[1]"},
		{"bad env name", map[string]any{"command": "true", "env": []map[string]string{{"name": "A=B", "value": "x"}}}, "env[0].name"},
		{"empty env name", map[string]any{"command": "true", "env": []map[string]string{{"name": "", "value": "x"}}}, "env[0].name"},
		{"NUL in env name", map[string]any{"command": "true", "env": []map[string]string{{"name": "A\x00", "value": "x"}}}, "env[0].name"},
		{"NUL in env value", map[string]any{"command": "true", "env": []map[string]string{{"name": "A", "value": "x\x00"}}}, "env[0].value"},
		{"duplicate env name", map[string]any{"command": "true", "env": []map[string]string{{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "A", "value": "3"}}}, "env[2].name: \"A\" is already set by env[0]"},
		{"env value missing", map[string]any{"command": "true", "env": []map[string]string{{"name": "A"}}}, "env[0]"},
		{"env as an object", map[string]any{"command": "true", "env": map[string]string{"A": "1"}}, "env"},
		{"env extra field", map[string]any{"command": "true", "env": []map[string]string{{"name": "A", "value": "1", "type": "x"}}}, "env[0]"},
		{"login with argv", map[string]any{"argv": []string{"true"}, "login": true}, "login"},
		{"login not a boolean", map[string]any{"command": "true", "login": "yes"}, "login"},
		{"zero timeout", map[string]any{"command": "true", "timeout_sec": 0}, "timeout_sec"},
		{"negative timeout", map[string]any{"command": "true", "timeout_sec": -5}, "timeout_sec"},
		{"fractional timeout", map[string]any{"command": "true", "timeout_sec": 1.5}, "timeout_sec"},
		{"string timeout", map[string]any{"command": "true", "timeout_sec": "10"}, "timeout_sec"},
		{"unknown field", map[string]any{"command": "true", "shell": "zsh"}, "shell"},
		{"wrong type", map[string]any{"command": []string{"ls"}}, "command"},
		{"cwd escapes", map[string]any{"command": "true", "cwd": "../.."}, "leaves the workspace"},
		{"cwd absolute outside", map[string]any{"command": "true", "cwd": "/etc"}, "outside the workspace"},
		{"cwd NUL", map[string]any{"command": "true", "cwd": "a\x00b"}, "NUL"},
		{"cwd missing", map[string]any{"command": "true", "cwd": "nope"}, "does not exist"},
		{"cwd is a file", map[string]any{"command": "true", "cwd": "afile"}, "not a directory"},
		{"cwd symlink outside", map[string]any{"command": "true", "cwd": "outside"}, "symlink"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := h.fail("workspace_exec", tc.args)
			t.Log(msg)
			if !strings.Contains(msg, tc.want) {
				t.Fatalf("error %q does not mention %q", msg, tc.want)
			}
		})
	}
	// decodeArgs, behind the schema, names the field too.
	var in execInput
	if err := decodeArgs(json.RawMessage(`{"command":"true","timeout_sec":1.5}`), &in); err == nil || !strings.Contains(err.Error(), "timeout_sec") {
		t.Fatalf("1.5 decoded: %v", err)
	}
}

func TestWorkspaceExecTimeoutClamped(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{MaxTimeout: 2 * time.Second}})
	out := h.execOK(map[string]any{"command": "echo start; sleep 30", "timeout_sec": 60})
	if !out.TimedOut || valueOf(out.ExitCode) != 137 || out.Signal != "killed" {
		t.Fatalf("not timed out: %+v", out)
	}
	if !out.TimeoutClamped || out.TimeoutSec != 2 || valueOf(out.Stdout) != "start\n" {
		t.Fatalf("%+v", out)
	}
	if !hasNotice(out.Notices, "timeout_sec 60 was clamped to the server's ceiling of 2 s") {
		t.Fatalf("notices: %q", out.Notices)
	}
	// Up to a year is clamped; beyond is a mistake (and would overflow).
	out = h.execOK(map[string]any{"command": "true", "timeout_sec": maxTimeoutSec})
	if !out.TimeoutClamped || out.TimeoutSec != 2 || valueOf(out.ExitCode) != 0 {
		t.Fatalf("a year: %+v", out)
	}
	for _, v := range []int64{maxTimeoutSec + 1, int64(1) << 62} {
		mustContain(t, h.fail("workspace_exec", map[string]any{"command": "true", "timeout_sec": v}), "invalid argument timeout_sec", fmt.Sprint(maxTimeoutSec))
	}
	// Within the ceiling: no clamp, no notice.
	out = h.execOK(map[string]any{"command": "true", "timeout_sec": 1})
	if out.TimeoutClamped || out.TimeoutSec != 1 || len(out.Notices) != 0 {
		t.Fatalf("%+v", out)
	}
}

func TestWorkspaceExecLargeOutput(t *testing.T) {
	const total = 10 << 20
	h := newHarness(t, harnessOptions{})
	res := h.call("workspace_exec", map[string]any{"command": "yes abc | head -c 10485760; echo tail-err >&2"})
	if res.IsError {
		t.Fatal(resultText(res))
	}
	var out execOutput
	decodeStructured(t, res, &out)
	limit := h.deps.Config.OutputLimit
	stdout := valueOf(out.Stdout)
	if !out.StdoutTruncated || valueOf(out.StdoutTotalBytes) != total || out.StderrTruncated || valueOf(out.Stderr) != "tail-err\n" {
		t.Fatalf("totals: truncated=%v total=%d", out.StdoutTruncated, valueOf(out.StdoutTotalBytes))
	}
	logRel := ".sandbox-mcp/runs/" + out.RunID + "/stdout.log"
	marker := "\n… [10 452 992 bytes omitted; full stdout in " + logRel + "] …\n"
	if !strings.Contains(stdout, marker) {
		t.Fatalf("marker missing: %q", stdout[limit/2-20:limit/2+150])
	}
	head, tail, _ := strings.Cut(stdout, marker)
	if len(head)+len(tail) != limit || !strings.HasPrefix(head, "abc\nabc\n") || !strings.HasSuffix(tail, "abc\nabc\n") {
		t.Fatalf("inline: head %d tail %d bytes", len(head), len(tail))
	}
	if !hasNotice(out.Notices, "stdout was 10 485 760 bytes; showing the first 16 384 and the last 16 384 bytes; read the cut part with read_files on "+logRel+" from offset 16384 (or its end with tail)") {
		t.Fatalf("notices: %q", out.Notices)
	}
	if out.FullOutput == nil || out.FullOutput.Stdout != logRel {
		t.Fatalf("full_output: %+v", out.FullOutput)
	}
	// The log is the whole stream, byte for byte.
	want := sha256.Sum256(bytes.Repeat([]byte("abc\n"), total/4))
	got, err := h.sandboxFile(logRel)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != total || sha256.Sum256(got) != want {
		t.Fatalf("log: %d bytes, sha256 mismatch", len(got))
	}
	// The JSON text content is the structured content.
	for _, c := range res.Content {
		if tc, ok := mcp.AsTextContent(c); ok && strings.HasPrefix(tc.Text, "{") && !json.Valid([]byte(tc.Text)) {
			t.Fatal("text content is not JSON")
		}
	}
}

func TestWorkspaceExecUTF8Cuts(t *testing.T) {
	// A small limit so the cut falls inside multi-byte characters.
	h := newHarness(t, harnessOptions{config: Config{OutputLimit: 64}})
	out := h.execOK(map[string]any{"command": `for i in $(seq 1 200); do printf 'é€😀'; done`})
	s := valueOf(out.Stdout)
	if !out.StdoutTruncated || !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) || out.StdoutInvalid {
		t.Fatalf("cut split a character: %q", s)
	}
	head, tail, ok := strings.Cut(s, "\n… [")
	_, tail, _ = strings.Cut(tail, "] …\n")
	if !ok || !strings.HasPrefix(head, "é€😀") || !strings.HasSuffix(tail, "é€😀") || len(head) > 32 || len(tail) > 32 {
		t.Fatalf("head %q tail %q", head, tail)
	}
}

func TestWorkspaceExecBinaryOutput(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	res := h.call("workspace_exec", map[string]any{"command": `printf 'ok\377\376bin\200ary\n'`})
	if res.IsError {
		t.Fatal(resultText(res))
	}
	var out execOutput
	decodeStructured(t, res, &out)
	if valueOf(out.Stdout) != "ok\uFFFDbin\uFFFDary\n" || !out.StdoutInvalid || out.StderrInvalid {
		t.Fatalf("%+v", out)
	}
	if !hasNotice(out.Notices, "not valid UTF-8") || !strings.Contains(resultText(res), "NOTICE: stdout contained bytes that are not valid UTF-8") {
		t.Fatalf("notice missing: %q", out.Notices)
	}
	for _, c := range res.Content {
		if tc, ok := mcp.AsTextContent(c); ok && !utf8.ValidString(tc.Text) {
			t.Fatal("text content is not UTF-8")
		}
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if !json.Valid(raw) || !utf8.Valid(raw) {
		t.Fatal("structured content is not valid JSON")
	}
	// The log keeps the exact bytes.
	got, err := h.sandboxFile(out.FullOutput.Stdout)
	if err != nil || string(got) != "ok\377\376bin\200ary\n" {
		t.Fatalf("log %q %v", got, err)
	}
}

func TestWorkspaceExecProgress(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{ProgressInterval: 100 * time.Millisecond}})
	res, err := h.callErr(context.Background(), "workspace_exec",
		map[string]any{"command": "echo compiling foo.c; sleep 3"}, "tok-1")
	if err != nil || res.IsError {
		t.Fatalf("%v %v", err, res)
	}
	waitFor(t, "a progress notification", func() bool { return len(h.progress()) > 0 })
	last := -1.0
	sawLine := false
	for _, n := range h.progress() {
		p := n.Params.AdditionalFields
		if p["progressToken"] != "tok-1" {
			t.Fatalf("token %v", p["progressToken"])
		}
		v, _ := p["progress"].(float64)
		if v <= last {
			t.Fatalf("progress not increasing: %v after %v", v, last)
		}
		last = v
		msg, _ := p["message"].(string)
		if !strings.Contains(msg, " s, ") || !strings.Contains(msg, "stdout") {
			t.Fatalf("message %q", msg)
		}
		sawLine = sawLine || strings.Contains(msg, "last line: compiling foo.c")
	}
	if !sawLine {
		t.Fatalf("no message quoted the last line: %v", h.progress())
	}
	// Without a token, nothing is sent.
	before := len(h.progress())
	h.execOK(map[string]any{"command": "sleep 0.5"})
	if len(h.progress()) != before {
		t.Fatal("progress sent without a token")
	}
}

func TestWorkspaceExecCancelKillsProcess(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cli := h.lease().Client
	const marker = "cancel-marker-7f3a"
	running := func() bool {
		ps, err := cli.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if strings.Contains(strings.Join(p.Args, " "), marker) {
				return true
			}
		}
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var res *mcp.CallToolResult
	var callErr error
	go func() {
		defer close(done)
		res, callErr = h.callErr(ctx, "workspace_exec", map[string]any{"command": "sleep 100 # " + marker}, nil)
	}()
	waitFor(t, "the command to start", running)
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled call did not return")
	}
	if callErr == nil && !res.IsError {
		t.Fatalf("a cancelled call succeeded: %s", resultText(res))
	}
	waitFor(t, "the process to be gone", func() bool { return !running() })
	// process_list agrees.
	var list processListOutput
	h.ok("process_list", map[string]any{}, &list)
	for _, o := range list.Others {
		if strings.Contains(o.Command, marker) {
			t.Fatalf("still listed: %+v", o)
		}
	}
}

func TestWorkspaceExecForegroundListedWhileRunning(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cli := h.lease().Client
	const marker = "fg-marker-91c2"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = h.callErr(ctx, "workspace_exec", map[string]any{"command": "sleep 100 # " + marker}, nil)
	}()
	waitFor(t, "the command to start", func() bool {
		ps, _ := cli.List(context.Background())
		for _, p := range ps {
			if strings.Contains(strings.Join(p.Args, " "), marker) {
				return true
			}
		}
		return false
	})
	var list processListOutput
	h.ok("process_list", map[string]any{}, &list)
	found := false
	for _, o := range list.Others {
		if strings.Contains(o.Command, marker) && strings.HasPrefix(o.RunID, "g1-r") {
			found = true
		}
	}
	if !found || len(list.Processes) != 0 {
		t.Fatalf("foreground run not in others: %+v", list)
	}
	cancel()
	<-done
}

func TestWorkspaceExecRunIDsSkipLeftovers(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	// Run directories from an earlier server process (whose counter restarted).
	h.execOK(map[string]any{"command": "mkdir -p .sandbox-mcp/runs/g1-r1 .sandbox-mcp/runs/g1-r2 .sandbox-mcp/runs/g1-r7"})
	// That call itself was g1-r1 and wrote nothing; the next one with output
	// must not reuse an existing directory.
	out := h.execOK(map[string]any{"command": "echo fresh"})
	if out.RunID != "g1-r8" {
		t.Fatalf("run id %s, want g1-r8", out.RunID)
	}
	if got, err := h.sandboxFile(out.FullOutput.Stdout); err != nil || string(got) != "fresh\n" {
		t.Fatalf("%q %v", got, err)
	}
}

func TestWorkspaceExecAnnotations(t *testing.T) {
	for _, network := range []bool{false, true} {
		var policy manage.NetworkPolicy
		if network {
			policy = manage.NetworkPolicyOn()
		}
		d := NewDeps(nil, Config{Network: policy}, nil)
		a := WorkspaceExec(d).Def.Annotations
		if *a.ReadOnlyHint || !*a.DestructiveHint || *a.IdempotentHint || *a.OpenWorldHint != network {
			t.Fatalf("network=%v: %+v", network, a)
		}
	}
	d := NewDeps(nil, Config{}, nil)
	for _, tc := range []struct {
		tool                                   Tool
		readOnly, destructive, idem, openWorld bool
	}{
		{ProcessOutput(d), true, false, true, false},
		{ProcessList(d), true, false, true, false},
		{ProcessInput(d), false, false, false, false},
		{ProcessSignal(d), false, true, true, false},
	} {
		a := tc.tool.Def.Annotations
		if *a.ReadOnlyHint != tc.readOnly || *a.DestructiveHint != tc.destructive || *a.IdempotentHint != tc.idem || *a.OpenWorldHint != tc.openWorld {
			t.Errorf("%s: %+v", tc.tool.Def.Name, a)
		}
		if tc.tool.Def.Title == "" || tc.tool.Def.Description == "" {
			t.Errorf("%s: no title or description", tc.tool.Def.Name)
		}
	}
}

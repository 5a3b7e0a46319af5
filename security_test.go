//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
)

// httpToken returns the token a loopback `serve --http` of the newcomer
// generated (its state directory's http-token).
func (n *newcomer) httpToken() string {
	n.t.Helper()
	raw, err := os.ReadFile(filepath.Join(n.dir, "state", httpTokenFile))
	if err != nil {
		n.t.Fatalf("the generated HTTP token: %v", err)
	}
	return strings.TrimSpace(string(raw))
}

// httpServer is a `sandbox-mcp serve --http` the test started, with its
// stderr readable line by line.
type httpServer struct {
	url    string
	stderr *bufio.Reader
	cmd    *exec.Cmd
}

// startHTTPServe starts `./sandbox-mcp serve --http 127.0.0.1:0 args…` for
// n and waits for its ready line; it is stopped (SIGTERM) when the test
// ends.
func startHTTPServe(t *testing.T, n *newcomer, args ...string) *httpServer {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(filepath.Join(n.dir, "sandbox-mcp"), append([]string{"serve", "--http", "127.0.0.1:0", "--ready-fd", "3"}, args...)...)
	c.Dir, c.Env = n.dir, n.env
	c.ExtraFiles = []*os.File{pw}
	errPipe, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	stderr := bufio.NewReader(errPipe)
	line, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if err != nil {
		_ = c.Process.Kill()
		rest, _ := io.ReadAll(stderr)
		_ = c.Wait()
		t.Fatalf("serve --http %v did not become ready: %v\n%s", args, err, rest)
	}
	s := &httpServer{url: strings.TrimSpace(strings.TrimPrefix(line, "ready ")), stderr: stderr, cmd: c}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop ends the server with SIGTERM and waits for it (once).
func (s *httpServer) stop(t *testing.T) {
	t.Helper()
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := io.ReadAll(s.stderr)
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("serve --http did not stop cleanly: %v\n%s", err, rest)
	}
}

// initializeBody is an MCP initialize request.
const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hostile","version":"0"}}}`

// postInitialize sends initialize to url with the given headers and returns
// the status.
func postInitialize(t *testing.T, url string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(initializeBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// A loopback HTTP server without --auth-tokens-file used to serve every
// user of the machine as principal "local": another user sent
// Sandbox-Workspace: default and read the operator's files. Now it makes a
// token at start, prints it once with the URL, keeps it in
// STATE-DIR/http-token (0600) and requires it.
func TestHTTPGeneratedToken(t *testing.T) {
	n := newNewcomer(t)
	s := startHTTPServe(t, n)
	var line string
	for !strings.Contains(line, "token: ") {
		var err error
		if line, err = s.stderr.ReadString('\n'); err != nil {
			t.Fatalf("stderr ended without the token: %v", err)
		}
	}
	_, token, ok := strings.Cut(strings.TrimSpace(line), "token: ")
	if !ok || !strings.Contains(line, s.url) || len(token) != 64 {
		t.Fatalf("first stderr line %q: want the URL %s and the token", line, s.url)
	}
	path := filepath.Join(n.dir, "state", httpTokenFile)
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, %v; want a regular file of mode 0600", path, fi, err)
	}
	if got := n.httpToken(); got != token {
		t.Fatalf("token file holds %q, stderr printed %q", got, token)
	}

	// Another local user, without the token, picking the operator's
	// workspace by name.
	for name, hdr := range map[string]map[string]string{
		"no token":    {"Sandbox-Workspace": "default"},
		"wrong token": {"Sandbox-Workspace": "default", "Authorization": "Bearer " + strings.Repeat("0", 64)},
		"not bearer":  {"Authorization": "Basic " + token},
	} {
		if code := postInitialize(t, s.url, hdr); code != http.StatusUnauthorized {
			t.Errorf("%s: initialize answered %d; want 401", name, code)
		}
	}
	resp, err := http.Get(strings.TrimSuffix(s.url, "/mcp") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d; want 401", resp.StatusCode)
	}
	if code := postInitialize(t, s.url, map[string]string{"Authorization": "Bearer " + token, "Sandbox-Workspace": "default"}); code != http.StatusOK {
		t.Errorf("initialize with the token: %d; want 200", code)
	}

	s.stop(t)
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("token file after the server stopped: %v; want it removed", err)
	}
}

// The old behaviour is there only under a name that says what it risks,
// and only on loopback.
func TestHTTPInsecureNoAuth(t *testing.T) {
	n := newNewcomer(t)
	s := startHTTPServe(t, n, "--insecure-no-auth")
	if code := postInitialize(t, s.url, nil); code != http.StatusOK {
		t.Errorf("initialize without a token under --insecure-no-auth: %d; want 200", code)
	}
	if _, err := os.Lstat(filepath.Join(n.dir, "state", httpTokenFile)); !os.IsNotExist(err) {
		t.Errorf("token file under --insecure-no-auth: %v; want none", err)
	}
	s.stop(t)
	for _, tc := range []struct{ args, want string }{
		{"--http 0.0.0.0:0 --insecure-no-auth", "refusing to listen"},
		{"--http 127.0.0.1:0 --insecure-no-auth --auth-tokens-file tokens.txt", "contradict"},
	} {
		_, errs, code := n.run("./sandbox-mcp serve "+tc.args, nil)
		if code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("serve %s: exit %d, stderr %q; want %q", tc.args, code, errs, tc.want)
		}
	}
}

// A truncated state.db (truncate -s 8192) killed every start with a SIGBUS
// in bbolt. Now the server starts, moves the file aside and says so.
func TestTruncatedStateDB(t *testing.T) {
	n := newNewcomer(t)
	n.mustRun(`./sandbox-mcp call --workspace keep put_files '{"files": [{"path": "a.txt", "content": "a"}]}'`)
	db := filepath.Join(n.dir, "state", "state.db")
	if fi, err := os.Stat(db); err != nil || fi.Size() <= 8192 {
		t.Fatalf("state.db: %v, %v; want more than 8192 bytes", fi, err)
	}
	n.mustRun("truncate -s 8192 " + db)
	out, errs, code := n.run(`./sandbox-mcp call --workspace keep workspace_info`, nil)
	if code != 0 || strings.Contains(errs, "SIGBUS") {
		t.Fatalf("call after truncating state.db: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if !strings.Contains(errs, "corrupt") || !strings.Contains(errs, "truncated") {
		t.Errorf("stderr %q: want the damaged store named", errs)
	}
	if aside, _ := filepath.Glob(db + ".corrupt-*"); len(aside) != 1 {
		t.Errorf("state.db not moved aside: %v", aside)
	}
}

// bwrapCall runs `sandbox-mcp call --isolation bwrap --workspace WS extra…
// TOOL ARGS` for n and returns the structured result; a machine whose bwrap
// does not work ends the test through testenv.Missing.
func bwrapCall(t *testing.T, n *newcomer, workspace, extra, tool string, args any) map[string]any {
	t.Helper()
	line, out := runBwrapCall(t, n, "--result-format json --workspace "+workspace+" "+extra, tool, args)
	var res map[string]any
	if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
		t.Fatalf("%s: %v in %q", line, err, out)
	}
	return res
}

// runBwrapCall runs `sandbox-mcp call --isolation bwrap flags… TOOL ARGS`
// for n and returns the command line and its stdout; a failed call fails
// the test, and a machine whose bwrap does not work ends it through
// testenv.Missing.
func runBwrapCall(t *testing.T, n *newcomer, flags, tool string, args any) (line, out string) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	line = "./sandbox-mcp call --isolation bwrap " + flags + " " + tool + " '" +
		strings.ReplaceAll(string(raw), "'", `'\''`) + "'"
	out, errs, code := n.run(line, nil)
	if code != 0 {
		if strings.Contains(errs, "bwrap") || strings.Contains(errs, "bubblewrap") {
			testenv.Missing(t, "a working bwrap sandbox (%s): install bubblewrap; sandbox-mcp doctor names the fix", errs)
		}
		t.Fatalf("%s: exit %d\n%s\n%s", line, code, out, errs)
	}
	return line, out
}

// bwrapExec runs command in workspace's bwrap sandbox and returns its
// stdout and stderr.
func bwrapExec(t *testing.T, n *newcomer, workspace, extra, command string) (stdout, stderr string) {
	t.Helper()
	res := bwrapCall(t, n, workspace, extra, "workspace_exec", map[string]any{"command": command})
	stdout, _ = res["stdout"].(string)
	stderr, _ = res["stderr"].(string)
	return stdout, stderr
}

// A bwrap sandbox had no seccomp filter: nested user namespaces and bwrap
// itself worked inside, so the whole kernel surface of a user namespace
// was a tenant's. Now a filter modelled on Docker's default profile makes
// those calls fail with EPERM, and ordinary programs still run.
func TestBwrapSeccomp(t *testing.T) {
	n := newNewcomer(t)
	script := `
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name=ok"; else echo "$name=refused"; fi; }
try unshare unshare -Ur true
try unshare-net unshare -n true
try mount mount -t tmpfs x /mnt
try bwrap bwrap --ro-bind / / true
try sh sh -c 'echo hi | cat'
# envd itself works: it ran this script.
grep '^Seccomp:' /proc/self/status
`
	out, errs := bwrapExec(t, n, "seccomp", "", script)
	results := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			results[k] = v
		}
	}
	for _, attack := range []string{"unshare", "unshare-net", "mount", "bwrap"} {
		if results[attack] != "refused" {
			t.Errorf("%s inside the sandbox: %q; want it refused\nstdout: %s\nstderr: %s", attack, results[attack], out, errs)
		}
	}
	if results["sh"] != "ok" {
		t.Errorf("sh inside the sandbox: %q; want it to work\n%s", results["sh"], errs)
	}
	// Mode 2 is a seccomp filter.
	if !strings.Contains(out, "Seccomp:\t2") {
		t.Errorf("/proc/self/status in the sandbox: %q; want Seccomp: 2 (filtered)", out)
	}
	// The nested user namespace is refused by the filter (EPERM), not by a
	// missing program.
	_, errs = bwrapExec(t, n, "seccomp", "", "unshare -Ur true")
	if !strings.Contains(errs, "Operation not permitted") {
		t.Errorf("unshare -Ur true: stderr %q; want Operation not permitted", errs)
	}
	if _, err := exec.LookPath("python3"); err == nil {
		out, errs = bwrapExec(t, n, "seccomp", "", `python3 -c 'import subprocess, os; print(subprocess.run(["echo", "py"], capture_output=True, text=True).stdout.strip(), os.getpid() > 0)'`)
		if strings.TrimSpace(out) != "py True" {
			t.Errorf("python3 inside the sandbox: stdout %q, stderr %q", out, errs)
		}
	}
}

// holdScript forks children that exec `sleep` named $0 until fork fails,
// prints "held N", and keeps them (and itself) alive.
const holdScript = `import os, sys, time
n = 0
while n < 100000:
    try:
        pid = os.fork()
    except OSError as e:
        break
    if pid == 0:
        os.execv("/bin/sleep", [sys.argv[1], "3600"])
    n += 1
print("held", n, flush=True)
time.sleep(3600)
`

// forkScript forks 10 children that exec `sleep` named $1 and prints
// "forked N" (how many forks worked).
const forkScript = `import os, sys
n = 0
for i in range(10):
    try:
        pid = os.fork()
    except OSError as e:
        print("fork failed:", e, flush=True)
        break
    if pid == 0:
        os.execv("/bin/sleep", [sys.argv[1], "3600"])
    n += 1
print("forked", n, flush=True)
`

// hostUIDsOf returns the host uids of the processes whose argv[0] is name.
func hostUIDsOf(t *testing.T, name string) map[string]int {
	t.Helper()
	uids := map[string]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmdline), name+"\x00") {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				uids[strings.Fields(rest)[0]]++
			}
		}
	}
	return uids
}

// Every sandbox of a root server ran as host uid 65534, so RLIMIT_NPROC —
// counted per host uid across the user namespaces it made — was shared:
// one tenant holding its limit's worth of processes made another's forks
// fail. Now each sandbox has its own host uid. Both servers run with
// RLIMIT_NPROC at the sandbox's pids limit, so that with a shared uid
// sandbox B's forks fail for certain once A holds its limit; with separate
// ids they succeed.
func TestSandboxesHaveTheirOwnHostIDs(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Missing(t, "python3 (to fork processes in the sandbox): apt-get install python3")
	}
	n := newNewcomer(t)
	// The sandboxes' host users search their way to the state directory
	// (otherwise sandboxes fall back to root's uid, with a warning).
	if err := os.Chmod(n.dir, 0o711); err != nil {
		t.Fatal(err)
	}
	const pids = 48
	start := func(ws string) *mcpclient.Client {
		t.Helper()
		c, err := mcpclient.NewStdioMCPClient("/bin/sh", []string{"SANDBOX_MCP_STATE_DIR=" + filepath.Join(n.dir, "state")},
			"-c", fmt.Sprintf(`ulimit -p %d 2>/dev/null || ulimit -u %d; exec "$0" serve --isolation bwrap --log-level warn --workspace %s --pids %d`, pids, pids, ws, pids), n.bin)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		initialize(t, context.Background(), c)
		return c
	}
	ctx := context.Background()
	a, b := start("tenant-a"), start("tenant-b")
	put := func(c *mcpclient.Client, name, content string) {
		t.Helper()
		res := callTool(t, ctx, c, "put_files", map[string]any{"files": []any{map[string]any{"path": name, "content": content}}})
		if res.IsError {
			t.Fatalf("put_files: %s", textOf(res))
		}
	}
	put(a, "hold.py", holdScript)
	put(b, "fork.py", forkScript)
	if info := textOf(callTool(t, ctx, a, "workspace_info", map[string]any{})); !strings.Contains(info, "bwrap") {
		testenv.Missing(t, "a bwrap sandbox (workspace_info: %s): install bubblewrap", info)
	}

	// The start waits for the first output ("held N"), so the saturated
	// sandbox is not asked for more: its envd, counted in the limit, may
	// find no thread left to answer.
	res := callTool(t, ctx, a, "workspace_exec", map[string]any{"argv": []any{"python3", "hold.py", "hold-a"}, "background": true, "wait_sec": 30})
	if res.IsError {
		t.Fatalf("background hold.py: %s", textOf(res))
	}
	handle, _ := res.StructuredContent.(map[string]any)["process"].(string)
	if handle == "" {
		t.Fatalf("background hold.py: %s", textOf(res))
	}
	var held int
	if first, _ := res.StructuredContent.(map[string]any)["output"].(string); strings.HasPrefix(first, "held ") {
		if _, err := fmt.Sscanf(first, "held %d", &held); err != nil {
			t.Fatalf("start output: %q", first)
		}
	}
	for range 20 {
		if held > 0 {
			break
		}
		out := textOf(callTool(t, ctx, a, "process_output", map[string]any{"process": handle, "wait_sec": 30}))
		if _, rest, ok := strings.Cut(out, "held "); ok {
			if _, err := fmt.Sscanf(rest, "%d", &held); err != nil {
				t.Fatalf("process_output: %q", out)
			}
			break
		}
	}
	// The limit counts every task of the sandbox: envd's threads and
	// python too.
	if held < pids/2 || held >= pids {
		t.Fatalf("sandbox A held %d processes; want close to, and below, its limit of %d", held, pids)
	}

	// Saturated, A's envd still answers (it keeps idle threads for that;
	// the Go runtime aborts when it cannot make one): concurrent reads, each
	// a blocking file syscall in envd, and a command that cannot fork, which
	// fails as such. A is not replaced.
	var reads sync.WaitGroup
	readErrs := make(chan string, 4)
	for range 4 {
		reads.Go(func() {
			req := mcp.CallToolRequest{}
			req.Params.Name = "read_files"
			req.Params.Arguments = map[string]any{"paths": []any{"hold.py"}}
			res, err := a.CallTool(ctx, req)
			switch {
			case err != nil:
				readErrs <- err.Error()
			case res.IsError || !strings.Contains(textOf(res), "os.fork()"):
				readErrs <- textOf(res)
			}
		})
	}
	reads.Wait()
	close(readErrs)
	for msg := range readErrs {
		t.Errorf("read_files in saturated sandbox A: %s", msg)
	}
	res = callTool(t, ctx, a, "workspace_exec", map[string]any{"argv": []any{"true"}})
	if out := textOf(res); !res.IsError || !strings.Contains(out, "process limit is reached") || strings.Contains(out, "restarted") {
		t.Errorf("workspace_exec in saturated sandbox A: %s; want a failure to start that names the process limit, the sandbox kept", out)
	}

	res = callTool(t, ctx, b, "workspace_exec", map[string]any{"argv": []any{"python3", "fork.py", "hold-b"}})
	if out := textOf(res); res.IsError || !strings.Contains(out, "forked 10") {
		t.Fatalf("sandbox B, while A holds %d processes: %s", held, out)
	}

	uidsA, uidsB := hostUIDsOf(t, "hold-a"), hostUIDsOf(t, "hold-b")
	if len(uidsA) != 1 || len(uidsB) != 1 {
		t.Fatalf("host uids of A's processes %v, of B's %v; want one each", uidsA, uidsB)
	}
	for uid := range uidsA {
		if _, shared := uidsB[uid]; shared || uid == "0" || uid == "65534" {
			t.Errorf("A runs as host uid %s, B as %v; want distinct unprivileged ids of their own", uid, uidsB)
		}
		if uidsA[uid] != held {
			t.Errorf("%d of A's processes found on the host, it held %d", uidsA[uid], held)
		}
	}
}

// --isolation auto fell back to unisolated sandboxes wherever bubblewrap
// did not work, over HTTP too, handing remote principals a shell as the
// server's user. Now serving HTTP refuses to start then, naming the fixes;
// an explicit --isolation none still serves, and stdio keeps the fallback
// with its notice. The provider is named: under --provider auto a host
// without bwrap gets the docker provider when an engine answers.
func TestAutoIsolationOverHTTPRefusesWithoutBwrap(t *testing.T) {
	n := newNewcomer(t)
	noBwrap := "PATH=/nonexistent "
	_, errs, code := n.run(noBwrap+"./sandbox-mcp serve --provider local --http 127.0.0.1:0", nil)
	if code == 0 {
		t.Fatalf("serve --http without bwrap under --isolation auto started (stderr %q)", errs)
	}
	for _, fix := range []string{"refusing to serve HTTP", "install bubblewrap", "--provider docker", "--isolation none"} {
		if !strings.Contains(errs, fix) {
			t.Errorf("stderr %q: want it to say %q", errs, fix)
		}
	}
	n.env = append(n.env, "PATH=/nonexistent")
	s := startHTTPServe(t, n, "--provider", "local", "--isolation", "none")
	if code := postInitialize(t, s.url, map[string]string{"Authorization": "Bearer " + n.httpToken()}); code != http.StatusOK {
		t.Errorf("initialize under an explicit --isolation none: %d; want 200", code)
	}
	s.stop(t)
	out, errs, code := n.run("./sandbox-mcp call --provider local --result-format json workspace_info", nil)
	if code != 0 || !strings.Contains(out, `"isolation":"none"`) || !strings.Contains(out, "NOT isolated") {
		t.Errorf("call over stdio without bwrap: exit %d\nstdout: %s\nstderr: %s\nwant the unisolated fallback with its notice", code, out, errs)
	}
}

// After one run as root, root-owned parent cgroups made every unprivileged
// server fail to create sandboxes, and --memory was silently ignored for an
// unprivileged user (a log line only). Now the unprivileged server skips
// parents it cannot use, and every limit it cannot enforce is said in
// workspace_info and in a notice.
func TestUnprivilegedAfterRoot(t *testing.T) {
	testenv.RequireRoot(t)
	nobody := testenv.RequireUser(t, "nobody")
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	n := newNewcomer(t)
	// As root first: the parent cgroups are made, root's.
	bwrapExec(t, n, "root", "", "true")

	dir := filepath.Join(n.dir, "nobody")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox-mcp")
	raw, err := os.ReadFile(n.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(n.dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "call", "--result-format", "json", "--isolation", "bwrap", "--memory", "256MiB", "workspace_info")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "SANDBOX_MCP_STATE_DIR=" + filepath.Join(dir, "state"), "SANDBOX_MCP_LOG_LEVEL=warn"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), "bwrap") {
			testenv.Missing(t, "bwrap for an unprivileged user (%s): allow unprivileged user namespaces", stderr.String())
		}
		t.Fatalf("workspace_info as nobody after a root run: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	var info struct {
		Isolation string   `json:"isolation"`
		Warnings  []string `json:"warnings"`
		Notices   []string `json:"notices"`
	}
	if err := json.Unmarshal([]byte(lastLine(out)), &info); err != nil {
		t.Fatalf("workspace_info: %v in %q", err, out)
	}
	if info.Isolation != "bwrap" {
		t.Errorf("isolation %q; want bwrap", info.Isolation)
	}
	said := func(list []string) bool {
		for _, w := range list {
			if strings.Contains(w, "NOT enforced") && (strings.Contains(w, "emory")) {
				return true
			}
		}
		return false
	}
	if !said(info.Warnings) || !strings.Contains(out, "NOTICE:") && !said(info.Notices) {
		t.Errorf("the unenforced memory limit is not said in workspace_info's warnings and a notice:\n%s", out)
	}
}

// `dd` of 2 GiB into the workspace landed on the host's disk, and a 1 GiB
// stdout flood left a 1.1 GB log. Now a root server's bwrap sandbox keeps
// its workspace, /tmp and run logs on its own --disk sized filesystem
// (writes past it fail with ENOSPC inside; the host holds no more than the
// image), other sandboxes keep writing, and a run log stops at 64 MiB with
// the totals still exact.
func TestDiskQuota(t *testing.T) {
	testenv.RequireRoot(t)
	n := newNewcomer(t)
	// The sandbox's host user reaches the state directory (otherwise it
	// runs as root's uid and the quota still holds, but not as here).
	if err := os.Chmod(n.dir, 0o711); err != nil {
		t.Fatal(err)
	}
	const quota = 64 << 20
	disk := fmt.Sprintf("--disk %d", quota)
	info := bwrapCall(t, n, "full", disk, "workspace_info", map[string]any{})
	warnings, _ := info["warnings"].([]any)
	for _, w := range warnings {
		if s, _ := w.(string); strings.Contains(s, "Disk use is NOT bounded") {
			testenv.Missing(t, "a disk quota (%s): loop devices, mkfs.ext4 and mount", w)
		}
	}
	out, errs := bwrapExec(t, n, "full", disk, `dd if=/dev/zero of=big bs=1M count=100 2>&1; dd if=/dev/zero of=/tmp/big bs=1M count=10 2>&1; df -B1 --output=size /workspace | tail -1`)
	if strings.Count(out, "No space left on device") != 2 {
		t.Errorf("dd past --disk into the workspace and /tmp: %q %q; want ENOSPC twice", out, errs)
	}
	images, _ := filepath.Glob(filepath.Join(n.dir, "state", "sandboxes", "*", "disk.img"))
	if len(images) != 1 {
		t.Fatalf("disk images: %v; want one", images)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(images[0], &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > quota {
		t.Errorf("the host holds %d bytes for the sandbox; want at most the quota, %d", used, quota)
	}
	// Another sandbox still writes.
	if out, errs := bwrapExec(t, n, "other", disk, "dd if=/dev/zero of=f bs=1M count=8 2>/dev/null && echo written"); strings.TrimSpace(out) != "written" {
		t.Errorf("a second sandbox's write: %q %q", out, errs)
	}

	// A 1 GiB flood: the log stops at 64 MiB, the total is exact.
	const flood = 1 << 30
	res := bwrapCall(t, n, "flood", "", "workspace_exec", map[string]any{"command": fmt.Sprintf("yes | head -c %d", flood)})
	if total, _ := res["stdout_total_bytes"].(float64); int64(total) != flood {
		t.Errorf("stdout_total_bytes %v; want %d", res["stdout_total_bytes"], flood)
	}
	log, _ := res["full_output"].(map[string]any)["stdout"].(string)
	out, _ = bwrapExec(t, n, "flood", "", "stat -c %s "+log+"; tail -n 1 "+log)
	var size int64
	if _, err := fmt.Sscanf(out, "%d", &size); err != nil || size > 64<<20+256 || !strings.Contains(out, "not saved") {
		t.Errorf("the flood's log %s: %q; want at most 64 MiB and a last line saying what was not saved", log, out)
	}
}

// Finding 1, against the real binary: inside alice's sandbox the tenant
// replaces everything it can write where the daemon's socket used to be
// with symlinks: envd.sock to a host socket, others to bob's socket and
// control directory,
// then alice's server restarts, so her next calls dial afresh. They still
// run in alice's sandbox, bob's workspace is untouched, and the host socket
// never sees a connection.
func TestSocketSwapFromInsideTheSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	n := newNewcomer(t)
	state := filepath.Join(n.dir, "state")
	start := func(ws string) *mcpclient.Client {
		t.Helper()
		c, err := mcpclient.NewStdioMCPClient(n.bin, []string{"SANDBOX_MCP_STATE_DIR=" + state},
			"serve", "--isolation", "bwrap", "--log-level", "warn", "--result-format", "json", "--workspace", ws)
		if err != nil {
			t.Fatal(err)
		}
		initialize(t, context.Background(), c)
		return c
	}
	ctx := context.Background()
	sh := func(c *mcpclient.Client, line string) string {
		t.Helper()
		res := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": line})
		out, _ := res.StructuredContent.(map[string]any)["stdout"].(string)
		if res.IsError {
			t.Fatalf("%s: %s", line, textOf(res))
		}
		return strings.TrimSpace(out)
	}
	alice, bob := start("alice"), start("bob")
	defer bob.Close()
	aliceID, bobID := sh(alice, "hostname"), sh(bob, "hostname")
	if aliceID == "" || aliceID == bobID {
		t.Fatalf("sandbox ids %q and %q", aliceID, bobID)
	}
	if info := textOf(callTool(t, ctx, alice, "workspace_info", map[string]any{})); !strings.Contains(info, "bwrap") {
		testenv.Missing(t, "a bwrap sandbox (workspace_info: %s): install bubblewrap", info)
	}
	sh(bob, "echo bob > owner")

	hostSock := filepath.Join(n.dir, "host.sock")
	ln, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Connections are accepted in the order they were made: when the
	// test's own sentinel connection (its first byte 0xff) comes, every
	// connection the server made before it has been counted.
	before := make(chan int, 1)
	go func() {
		accepted := 0
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted++
			go func(c net.Conn, others int) {
				defer c.Close()
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err == nil && b[0] == 0xff {
					before <- others
				}
			}(c, accepted-1)
		}
	}()

	bobDir := filepath.Join(state, "sandboxes", bobID)
	attack := fmt.Sprintf(`cd /.sandbox-mcp/run || exit 1
for f in * .[!.]*; do [ -e "$f" ] && mv "$f" "moved-$f"; done
ln -s %[2]s envd.sock
ln -s %[1]s/ctl ctl
ln -s %[1]s/run/envd.sock bob.sock
echo replaced`, bobDir, hostSock)
	if out := sh(alice, attack); !strings.Contains(out, "replaced") {
		t.Fatalf("attack script: %s", out)
	}
	alice.Close()

	alice = start("alice")
	defer alice.Close()
	if got := sh(alice, "hostname"); got != aliceID {
		t.Fatalf("after the swap and a restart, alice's command ran in sandbox %q; want her own %q (bob is %q)", got, aliceID, bobID)
	}
	sh(alice, "echo alice > owner")
	if got := sh(bob, "cat owner"); got != "bob" {
		t.Errorf("bob's file after alice's write: %q; want bob", got)
	}
	if got := sh(alice, "cat owner"); got != "alice" {
		t.Errorf("alice's file: %q; want alice", got)
	}
	sentinel, err := net.Dial("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	defer sentinel.Close()
	if _, err := sentinel.Write([]byte{0xff}); err != nil {
		t.Fatal(err)
	}
	if others := <-before; others != 0 {
		t.Errorf("the server made %d connections to the host socket alice's sandbox pointed its envd.sock at", others)
	}
}

// Finding 8, against the real binary: collected artifacts, whatever their
// modes in the sandbox, are private to the server's user. Another local
// user cannot list the store (whose names reveal principals and
// workspaces) or read a collected file, not even one world-readable in the
// sandbox.
func TestArtifactsPrivateToTheServerUser(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireUser(t, "nobody")
	n := newNewcomer(t)
	if err := os.Chmod(n.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	n.mustRun(`./sandbox-mcp call --workspace w put_files '{"files": [{"path": "out/report.txt", "content": "tenant data", "mode": "0644"}]}'`)
	n.mustRun(`./sandbox-mcp call --workspace w collect_outputs '{"globs": ["out/**"]}'`)
	// The state directory open to all, as an operator might leave it: the
	// store itself must hold.
	if err := os.Chmod(filepath.Join(n.dir, "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("su", "-s", "/bin/sh", "nobody", "-c", "ls "+filepath.Join(n.dir, "state")).CombinedOutput(); err != nil {
		t.Fatalf("as nobody, listing the open state directory failed: %v: %s", err, out)
	}
	art := filepath.Join(n.dir, "state", "artifacts")
	var collected string
	_ = filepath.WalkDir(art, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "report.txt" {
			collected = p
		}
		return nil
	})
	if collected == "" {
		t.Fatalf("no report.txt under %s", art)
	}
	for _, probe := range []string{"ls " + art, "cat " + collected, "ls " + filepath.Dir(collected)} {
		cmd := exec.Command("su", "-s", "/bin/sh", "nobody", "-c", probe)
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("as nobody, %s succeeded: %s", probe, out)
		}
	}
}

// --disk off: a root server's bwrap sandbox gets no disk image (its
// workspace is on the host's filesystem) and workspace_info says its disk
// use is not bounded.
func TestDiskOff(t *testing.T) {
	testenv.RequireRoot(t)
	n := newNewcomer(t)
	info := bwrapCall(t, n, "off", "--disk off", "workspace_info", map[string]any{})
	warnings, _ := info["warnings"].([]any)
	said := false
	for _, w := range warnings {
		s, _ := w.(string)
		said = said || strings.Contains(s, "Disk use is NOT bounded")
	}
	if !said {
		t.Errorf("workspace_info warnings %v; want one saying disk use is not bounded", warnings)
	}
	if out, errs := bwrapExec(t, n, "off", "--disk off", "dd if=/dev/zero of=f bs=1M count=8 2>/dev/null && echo written"); strings.TrimSpace(out) != "written" {
		t.Errorf("a write with --disk off: %q %q", out, errs)
	}
	if images, _ := filepath.Glob(filepath.Join(n.dir, "state", "sandboxes", "*", "disk.img")); len(images) != 0 {
		t.Errorf("disk images with --disk off: %v", images)
	}
	if _, err := os.Stat(filepath.Join(n.dir, "state", "disk-templates")); !os.IsNotExist(err) {
		t.Errorf("disk templates with --disk off: %v", err)
	}
}

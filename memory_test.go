//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// peakRSSKiB is the peak resident set (VmHWM) of process pid, in KiB.
func peakRSSKiB(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// connectHTTP is an initialized MCP client of s with the given bearer token.
func connectHTTP(t *testing.T, s *httpServer, token string, headers map[string]string) *mcpclient.Client {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + token}
	for k, v := range headers {
		h[k] = v
	}
	c, err := mcpclient.NewStreamableHttpClient(s.url, transport.WithHTTPHeaders(h), transport.WithHTTPBasicClient(http.DefaultClient))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	initialize(t, t.Context(), c)
	return c
}

// mustOK fails the test when res is an error result.
func mustOK(t *testing.T, what string, res *mcp.CallToolResult) string {
	t.Helper()
	text := textOf(res)
	if res.IsError {
		t.Fatalf("%s: error result: %s", what, text)
	}
	return text
}

// Listings used to hold the whole listing before applying their cap: with
// 300k files in the sandbox a list_files, a ** glob or a collect_outputs
// took the server from 42 MB to 220–290 MB peak RSS, and six at once to
// 1.7 GB. Now they walk the listing in pages and stop at their cap, so the
// server's peak RSS stays where it was whatever the file count.
func TestListingMemoryBounded(t *testing.T) {
	n := newNewcomer(t)
	s := startHTTPServe(t, n)
	c := connectHTTP(t, s, n.httpToken(), nil)
	ctx := t.Context()
	const files = 200000
	mustOK(t, "create files", callTool(t, ctx, c, "workspace_exec", map[string]any{
		"command": "mkdir -p many && cd many && seq " + strconv.Itoa(files) + " | xargs touch && ls | wc -l", "timeout_sec": 600,
	}))
	before := peakRSSKiB(t, s.cmd.Process.Pid)
	text := mustOK(t, "list_files depth 1", callTool(t, ctx, c, "list_files", map[string]any{"path": "many", "depth": 1}))
	if !strings.Contains(text, "at least") || !strings.Contains(text, "continue with offset") {
		t.Errorf("list_files of %d files: %.300s; want it truncated with a lower bound", files, text)
	}
	mustOK(t, "list_files **", callTool(t, ctx, c, "list_files", map[string]any{"glob": "**"}))
	text = mustOK(t, "collect_outputs", callTool(t, ctx, c, "collect_outputs", map[string]any{"globs": []string{"many/**"}}))
	if !strings.Contains(text, "at least 101 files matched") {
		t.Errorf("collect_outputs of %d files: %.300s; want it cut at max_files with a lower bound", files, text)
	}
	after := peakRSSKiB(t, s.cmd.Process.Pid)
	// Holding the listing cost 120+ MB for 200k files; a page is a few MB.
	const boundKiB = 48 << 10
	t.Logf("server peak RSS %d KiB before the listings, %d KiB after", before, after)
	if after-before > boundKiB {
		t.Errorf("the listings raised the server's peak RSS by %d KiB; want at most %d KiB", after-before, boundKiB)
	}
}

// BenchmarkHTTPPutFilesRSS reports the peak RSS of `serve --http` while four
// put_files of 90 MiB of text each arrive at once from one principal, with
// the default request memory budget (512 MiB: all four fit) and with a
// 192 MiB one (two fit, two get 503 before their bodies are read), and how
// many calls ran. SANDBOX_MCP_BENCH_BIN measures another build instead (for
// one from before the budget, only the default case runs).
func BenchmarkHTTPPutFilesRSS(b *testing.B) {
	bin := os.Getenv("SANDBOX_MCP_BENCH_BIN")
	if bin == "" {
		bin = envdtest.Binary(b)
	}
	const size = 90 << 20
	args, err := json.Marshal(map[string]any{"files": []map[string]any{{"path": "big.txt", "content": strings.Repeat("x", size)}}})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"put_files","arguments":` + string(args) + `}}`)
	for _, tc := range []struct {
		name string
		args []string
	}{{"default", nil}, {"budget192MiB", []string{"--max-request-memory", "192MiB"}}} {
		b.Run(tc.name, func(b *testing.B) {
			if os.Getenv("SANDBOX_MCP_BENCH_BIN") != "" && tc.args != nil {
				b.Skip("the other build may not know", tc.args[0])
			}
			var peak int64
			var ran, refused int
			for b.Loop() {
				srv := startBenchHTTP(b, bin, tc.args...)
				results := make(chan int, 4)
				for range 4 {
					go func() { results <- srv.post(b, body) }()
				}
				ran, refused = 0, 0
				for range 4 {
					switch <-results {
					case http.StatusOK:
						ran++
					case http.StatusServiceUnavailable:
						refused++
					}
				}
				rss, err := envdtest.PeakRSS(srv.cmd.Process.Pid)
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, rss)
				srv.stop()
			}
			b.ReportMetric(float64(peak)/(1<<20), "server-peak-MiB")
			b.ReportMetric(float64(ran), "calls-ran")
			b.ReportMetric(float64(refused), "calls-refused")
		})
	}
}

// benchHTTP is a `serve --http` started by a benchmark, with a raw session.
type benchHTTP struct {
	cmd   *exec.Cmd
	url   string
	token string
	sid   string
}

// startBenchHTTP starts bin's `serve --http` on loopback (its generated
// token, --max-put-bytes 95MiB) and opens a session.
func startBenchHTTP(b *testing.B, bin string, args ...string) *benchHTTP {
	b.Helper()
	state := filepath.Join(envdtest.ShortTempDir(b), "state")
	pr, pw, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--http", "127.0.0.1:0", "--ready-fd", "3", "--state-dir", state, "--log-level", "warn", "--max-put-bytes", "95MiB"}, args...)...)
	cmd.ExtraFiles = []*os.File{pw}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pw.Close()
	line, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatalf("serve --http did not become ready: %v", err)
	}
	token, err := os.ReadFile(filepath.Join(state, httpTokenFile))
	if err != nil {
		b.Fatal(err)
	}
	s := &benchHTTP{cmd: cmd, url: strings.TrimSpace(strings.TrimPrefix(line, "ready ")), token: strings.TrimSpace(string(token))}
	resp := s.do(b, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}`))
	s.sid = resp.Header.Get("Mcp-Session-Id")
	resp.Body.Close()
	s.do(b, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)).Body.Close()
	return s
}

func (s *benchHTTP) do(b *testing.B, body []byte) *http.Response {
	req, err := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+s.token)
	if s.sid != "" {
		req.Header.Set("Mcp-Session-Id", s.sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Error(err)
		return &http.Response{StatusCode: 0, Body: io.NopCloser(strings.NewReader(""))}
	}
	return resp
}

// post sends body and returns the status, 200 only for a result that is not
// an error.
func (s *benchHTTP) post(b *testing.B, body []byte) int {
	resp := s.do(b, body)
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && (bytes.Contains(text, []byte(`"isError":true`)) || !bytes.Contains(text, []byte(`"written"`))) {
		b.Errorf("put_files: %.300s", text)
		return 0
	}
	return resp.StatusCode
}

func (s *benchHTTP) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// --max-request-memory bounds the request bodies the server holds: a body
// larger than the whole budget gets 413 naming the flag while the client is
// still sending it (the server never read it), and 0 turns the budget off.
func TestHTTPMaxRequestMemoryFlag(t *testing.T) {
	n := newNewcomer(t)
	s := startHTTPServe(t, n, "--max-request-memory", "1MiB")
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 2 << 20
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+n.httpToken())
	go func() { _, _ = pw.Write([]byte(`{"jsonrpc":"2.0","id":1,`)) }() // the rest is never sent
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "--max-request-memory 1048576") || !strings.Contains(string(body), "--max-body-bytes") {
		t.Fatalf("a 2 MiB body under a 1 MiB budget: %d %s; want 413 naming both limits", resp.StatusCode, body)
	}

	// 0 means no budget, not server.Config's zero (the default budget):
	// the server must get a negative value.
	for v, want := range map[byteSize]int64{0: -1, 1 << 20: 1 << 20} {
		h := httpOptions{maxRequestMemory: v, insecureNoAuth: true}
		if cfg, err := h.serverConfig(); err != nil || cfg.MaxRequestMemory != want {
			t.Errorf("--max-request-memory %d gives server.Config.MaxRequestMemory %d (%v); want %d", v, cfg.MaxRequestMemory, err, want)
		}
	}
	n2 := newNewcomer(t)
	off := startHTTPServe(t, n2, "--max-request-memory", "0")
	c := connectHTTP(t, off, n2.httpToken(), nil)
	mustOK(t, "put_files of 2 MiB without a budget", callTool(t, t.Context(), c, "put_files", map[string]any{
		"files": []map[string]any{{"path": "big.txt", "content": strings.Repeat("z", 2<<20)}},
	}))
}

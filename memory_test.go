//go:build linux

package main

import (
	"bufio"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
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

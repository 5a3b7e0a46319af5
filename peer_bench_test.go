//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The peer benchmarks run the transfer benchmarks' operations through
// Desktop Commander (npm @wonderwhy-er/desktop-commander, pinned in
// testdata/peers): an MCP server that reads, writes and runs on the host
// with no sandbox. It runs as `node …/dist/index.js` (its bin) over stdio,
// with a temporary HOME holding its config file:
//
//   - telemetryEnabled false (and DESKTOP_COMMANDER_DISABLE_TELEMETRY=1);
//   - fileReadLineLimit and fileWriteLineLimit 10,000,000 (defaults 1,000
//     and 50): read_file returns the whole 8 MiB file in one call, and
//     write_file takes it in one call without its over-the-limit notice;
//   - defaultShell /bin/bash, so start_process runs `bash -l -c true`, as
//     workspace_exec's command form does.
//
// Its feature-flag fetch and its background Chrome download (for PDFs) are
// pointed at a closed port on 127.0.0.1 (DC_FLAG_URL, HTTPS_PROXY), so the
// benchmark sends nothing off the machine.

// peerDir holds the pinned peers' package.json and package-lock.json.
const peerDir = "testdata/peers"

// peerLineLimit is the line limit the peer's config sets for reads and
// writes: more lines than the largest transfer has.
const peerLineLimit = 10_000_000

// peerConfig is the part of Desktop Commander's
// ~/.claude-server-commander/config.json the benchmarks set.
type peerConfig struct {
	TelemetryEnabled   bool     `json:"telemetryEnabled"`
	FileReadLineLimit  int      `json:"fileReadLineLimit"`
	FileWriteLineLimit int      `json:"fileWriteLineLimit"`
	DefaultShell       string   `json:"defaultShell"`
	AllowedDirectories []string `json:"allowedDirectories"`
}

// peerSession starts Desktop Commander over stdio, or skips the benchmark
// when it (or node) is not installed.
func peerSession(b *testing.B) *stdioSession {
	b.Helper()
	entry := filepath.Join(peerDir, "node_modules", "@wonderwhy-er", "desktop-commander", "dist", "index.js")
	if _, err := os.Stat(entry); err != nil {
		b.Skipf("Desktop Commander is not installed (%v): run `npm ci --ignore-scripts --prefix %s` (scripts/bench does)", err, peerDir)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skipf("Desktop Commander needs node: %v", err)
	}
	home := b.TempDir()
	cfg, err := json.Marshal(peerConfig{
		FileReadLineLimit: peerLineLimit, FileWriteLineLimit: peerLineLimit,
		DefaultShell: "/bin/bash", AllowedDirectories: []string{},
	})
	if err != nil {
		b.Fatal(err)
	}
	cfgDir := filepath.Join(home, ".claude-server-commander")
	if err := os.Mkdir(cfgDir, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), cfg, 0o600); err != nil {
		b.Fatal(err)
	}
	closedPort := "http://127.0.0.1:9"
	env := []string{
		"HOME=" + home,
		"DESKTOP_COMMANDER_DISABLE_TELEMETRY=1",
		"DC_FLAG_URL=" + closedPort + "/flags.json",
		"HTTPS_PROXY=" + closedPort, "HTTP_PROXY=" + closedPort, "NO_PROXY=",
		"https_proxy=" + closedPort, "http_proxy=" + closedPort, "no_proxy=",
	}
	return startStdioSession(b, env, node, entry)
}

// BenchmarkPeerWriteFile is Desktop Commander's write_file of the same text
// files as BenchmarkStdioBinaryPutFiles, over stdio.
func BenchmarkPeerWriteFile(b *testing.B) {
	s := peerSession(b)
	dir := b.TempDir()
	for _, ts := range transferSizes {
		text := benchText(ts.size)
		path := filepath.Join(dir, "bench-"+ts.name+".txt")
		// mode rewrite: without it the peer refuses to replace a file.
		args := map[string]any{"path": path, "content": text, "mode": "rewrite"}
		b.Run(ts.name, func(b *testing.B) {
			s.call(b, "write_file", args)
			if got, err := os.ReadFile(path); err != nil || string(got) != text {
				b.Fatalf("write_file wrote %d bytes that differ from the %d sent (%v)", len(got), len(text), err)
			}
			b.SetBytes(int64(ts.size))
			s.timedCalls(b, "write_file", args)
		})
	}
}

// BenchmarkPeerReadFile is Desktop Commander's read_file of the same text
// files as BenchmarkStdioBinaryReadFiles, whole, over stdio.
func BenchmarkPeerReadFile(b *testing.B) {
	s := peerSession(b)
	dir := b.TempDir()
	for _, ts := range transferSizes {
		text := benchText(ts.size)
		path := filepath.Join(dir, "bench-"+ts.name+".txt")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
		// offset and length count lines.
		args := map[string]any{"path": path, "offset": 0, "length": peerLineLimit}
		b.Run(ts.name, func(b *testing.B) {
			// The peer returns a header line, then the lines without
			// the file's last newline.
			if got := textOf(s.call(b, "read_file", args)); !strings.HasSuffix(got, "\n\n"+strings.TrimSuffix(text, "\n")) {
				b.Fatalf("read_file returned %d bytes without the %d of the file: %.300q", len(got), len(text), got)
			}
			b.SetBytes(int64(ts.size))
			s.timedCalls(b, "read_file", args)
		})
	}
}

// BenchmarkPeerStartProcessTrue is Desktop Commander's start_process of
// `true` (bash -l -c true on the host), over stdio: its nearest to
// workspace_exec.
func BenchmarkPeerStartProcessTrue(b *testing.B) {
	s := peerSession(b)
	args := map[string]any{"command": "true", "timeout_ms": 30000}
	if got := textOf(s.call(b, "start_process", args)); !strings.Contains(got, "Process started") {
		b.Fatalf("start_process true: %s", got)
	}
	s.timedCalls(b, "start_process", args)
}

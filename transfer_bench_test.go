//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// The transfer benchmarks here and the peer benchmarks in
// peer_bench_test.go measure the same operations through a real stdio
// session with the mcp-go client: writing and reading a 1 MiB and an 8 MiB
// text file, and a `true` round trip. scripts/bench runs both in one run and
// scripts/benchreport sets them side by side.
//
// With SANDBOX_MCP_BENCH_PERF=DIR set, every timed loop also records the
// server process with `perf record -g` into DIR/<benchmark>.perf.data (the
// timings of such a run include perf's overhead).

// transferSizes are the file sizes the transfer benchmarks move, by name.
var transferSizes = []struct {
	name string
	size int
}{{"1MiB", 1 << 20}, {"8MiB", 8 << 20}}

// benchText returns size bytes of ASCII text in lines of 40 to 119
// characters (the last may be shorter), each ending in "\n": the same text
// for the same size, so that every server gets the same bytes.
func benchText(size int) string {
	rng := rand.New(rand.NewPCG(1, uint64(size)))
	var sb strings.Builder
	sb.Grow(size)
	line := 0
	for sb.Len() < size {
		line++
		width := 40 + rng.IntN(80)
		if left := size - sb.Len(); width+1 > left {
			width = left - 1
		}
		n, _ := sb.WriteString(fmt.Sprintf("%06d", line%1000000)[:min(6, width)])
		for n < width {
			if n > 0 && rng.IntN(6) == 0 {
				sb.WriteByte(' ')
			} else {
				sb.WriteByte(byte('a' + rng.IntN(26)))
			}
			n++
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

// stdioSession is an mcp-go client on a server process it started, over
// stdio, initialized at revision 2025-11-25.
type stdioSession struct {
	c   *mcpclient.Client
	cmd *exec.Cmd
}

// startStdioSession starts command with args (env added to this process's
// environment) and initializes an MCP session with it; the process ends
// with the benchmark.
func startStdioSession(b *testing.B, env []string, command string, args ...string) *stdioSession {
	b.Helper()
	s := &stdioSession{}
	newCmd := func(ctx context.Context, command string, _ []string, args []string) (*exec.Cmd, error) {
		s.cmd = exec.CommandContext(ctx, command, args...)
		s.cmd.Env = append(os.Environ(), env...)
		return s.cmd, nil
	}
	c, err := mcpclient.NewStdioMCPClientWithOptions(command, nil, args, transport.WithCommandFunc(newCmd))
	if err != nil {
		b.Fatal(err)
	}
	s.c = c
	b.Cleanup(func() { c.Close() })
	initialize(b, context.Background(), c)
	return s
}

// call calls the tool name and fails the benchmark on a protocol error or
// a tool error.
func (s *stdioSession) call(b *testing.B, name string, args map[string]any) *mcp.CallToolResult {
	b.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := s.c.CallTool(b.Context(), req)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		b.Fatalf("%s: tool error: %.500s", name, textOf(res))
	}
	return res
}

// timedCalls calls the tool name with args b.N times (after b.SetBytes, if
// any) and reports the per-call p50 and p99, and the CPU time per call of
// the server process ("server-cpu-ms"; not counting processes it starts)
// and of this process, the client ("client-cpu-ms"): where the time went.
func (s *stdioSession) timedCalls(b *testing.B, name string, args map[string]any) {
	b.Helper()
	stopProfile := s.profile(b)
	cpu0, clientCPU0 := s.cpuTime(b), selfCPUTime(b)
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		s.call(b, name, args)
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	cpu, clientCPU := s.cpuTime(b)-cpu0, selfCPUTime(b)-clientCPU0
	stopProfile()
	perCall := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(len(ds)) }
	b.ReportMetric(perCall(cpu), "server-cpu-ms")
	b.ReportMetric(perCall(clientCPU), "client-cpu-ms")
	envdtest.ReportPercentiles(b, ds)
}

// cpuTime is the user and system CPU time the server process has used.
func (s *stdioSession) cpuTime(b *testing.B) time.Duration {
	b.Helper()
	return processCPUTime(b, s.cmd.Process.Pid)
}

// processCPUTime is the user and system CPU time process pid has used, from
// /proc (10 ms resolution).
func processCPUTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name (which may hold spaces) start at
	// the state, field 3; utime and stime are fields 14 and 15.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond
}

// selfCPUTime is the user and system CPU time this process has used.
func selfCPUTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// profile starts `perf record` on the server process when
// SANDBOX_MCP_BENCH_PERF names a directory, and returns the function that
// stops it. perf starts disabled and is enabled through its control FIFO,
// whose acknowledgement says the recording runs.
func (s *stdioSession) profile(b *testing.B) (stop func()) {
	b.Helper()
	dir := os.Getenv("SANDBOX_MCP_BENCH_PERF")
	if dir == "" {
		return func() {}
	}
	name := strings.ReplaceAll(b.Name(), "/", "_")
	ctl, ack := filepath.Join(b.TempDir(), "ctl"), filepath.Join(b.TempDir(), "ack")
	for _, fifo := range []string{ctl, ack} {
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	perf := exec.Command("perf", "record", "-q", "-e", "cpu-clock", "-g", "-D", "-1",
		"--control", "fifo:"+ctl+","+ack, "-p", strconv.Itoa(s.cmd.Process.Pid), "-o", filepath.Join(dir, name+".perf.data"))
	perf.Stderr = os.Stderr
	if err := perf.Start(); err != nil {
		b.Fatalf("perf: %v", err)
	}
	// Opening a FIFO blocks until perf opens its end.
	ctlW, err := os.OpenFile(ctl, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	ackR, err := os.Open(ack)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ctlW.WriteString("enable\n"); err != nil {
		b.Fatal(err)
	}
	if line, err := bufio.NewReader(ackR).ReadString('\n'); err != nil || line != "ack\n" {
		b.Fatalf("perf control: %q %v", line, err)
	}
	return func() {
		ctlW.Close()
		ackR.Close()
		_ = perf.Process.Signal(syscall.SIGINT)
		// perf writes its file and then may end by the SIGINT itself.
		var exit *exec.ExitError
		if err := perf.Wait(); err != nil && (!errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT) {
			b.Errorf("perf: %v", err)
		}
	}
}

// oursSession starts the built binary's serve command over stdio (local
// sandbox, the default) with a read cap that lets one read_files call
// return the largest transfer size whole.
func oursSession(b *testing.B) *stdioSession {
	bin := envdtest.Binary(b)
	state := filepath.Join(envdtest.ShortTempDir(b), "state")
	maxSize := transferSizes[len(transferSizes)-1].size
	return startStdioSession(b, nil, bin, "serve", "--state-dir", state, "--log-level", "warn",
		"--max-read-bytes", strconv.Itoa(maxSize))
}

// readFilesContent is the content of the first file of a read_files result:
// the text block its entry names by content_index.
func readFilesContent(b *testing.B, res *mcp.CallToolResult) string {
	b.Helper()
	out, _ := res.StructuredContent.(map[string]any)
	files, _ := out["files"].([]any)
	if len(files) != 1 {
		b.Fatalf("read_files: %.500s", textOf(res))
	}
	f, _ := files[0].(map[string]any)
	if f["truncated"] != false {
		b.Fatalf("read_files truncated the file: %v", f["note"])
	}
	idx, _ := f["content_index"].(float64)
	if int(idx) < 1 || int(idx) >= len(res.Content) {
		b.Fatalf("read_files: no content block for the file: %.500s", textOf(res))
	}
	text, _ := res.Content[int(idx)].(mcp.TextContent)
	return text.Text
}

// BenchmarkStdioBinaryPutFiles is put_files of one text file (1 MiB,
// 8 MiB) through the built binary over stdio, local sandbox: JSON encoding
// in the client, the pipe, the server's decoding and the envd upload.
func BenchmarkStdioBinaryPutFiles(b *testing.B) {
	s := oursSession(b)
	for _, ts := range transferSizes {
		text := benchText(ts.size)
		args := map[string]any{"files": []any{map[string]any{"path": "bench.txt", "content": text}}}
		b.Run(ts.name, func(b *testing.B) {
			// The first call creates the sandbox; check that the bytes
			// arrived whole.
			s.call(b, "put_files", args)
			if got := readFilesContent(b, s.call(b, "read_files", map[string]any{"paths": []any{"bench.txt"}, "limit": len(text)})); got != text {
				b.Fatalf("put_files wrote %d bytes that differ from the %d sent", len(got), len(text))
			}
			b.SetBytes(int64(ts.size))
			s.timedCalls(b, "put_files", args)
		})
	}
}

// BenchmarkStdioBinaryReadFiles is read_files of one text file (1 MiB,
// 8 MiB) through the built binary over stdio, local sandbox, the whole
// file in one call (the server runs with --max-read-bytes 8388608; the
// default cap is 1 MiB).
func BenchmarkStdioBinaryReadFiles(b *testing.B) {
	s := oursSession(b)
	for _, ts := range transferSizes {
		text := benchText(ts.size)
		name := "bench-" + ts.name + ".txt"
		b.Run(ts.name, func(b *testing.B) {
			s.call(b, "put_files", map[string]any{"files": []any{map[string]any{"path": name, "content": text}}})
			// limit: the whole file, read exactly (the default is a
			// model-sized budget of 2000 lines or 256 KiB).
			args := map[string]any{"paths": []any{name}, "limit": len(text)}
			if got := readFilesContent(b, s.call(b, "read_files", args)); got != text {
				b.Fatalf("read_files returned %d bytes that differ from the %d written", len(got), len(text))
			}
			b.SetBytes(int64(ts.size))
			s.timedCalls(b, "read_files", args)
		})
	}
}

// BenchmarkStdioBinaryExec is workspace_exec of `true` through the built
// binary over stdio, local sandbox: as an argv, and as a command line
// (bash -lc, the form the peer's start_process uses too).
func BenchmarkStdioBinaryExec(b *testing.B) {
	s := oursSession(b)
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"argv", map[string]any{"argv": []any{"true"}}},
		{"command", map[string]any{"command": "true"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if out := textOf(s.call(b, "workspace_exec", tc.args)); !strings.HasPrefix(out, "exit 0 ") {
				b.Fatalf("workspace_exec true: %s", out)
			}
			s.timedCalls(b, "workspace_exec", tc.args)
		})
	}
}

//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// bigFileBytes is the size of the file the large-transfer benchmarks move.
const bigFileBytes = 8 << 20

// sourceLikeText returns n bytes of text shaped like source code: indented lines
// of words, quotes, tabs and markup, so that a JSON encoding escapes some of
// it (quotes, tabs, newlines) as real files make it.
func sourceLikeText(n int) string {
	words := []string{"func", "return", "if", "err", "!=", "nil", "{", "}", `"quoted"`, "x := 42", "// comment",
		"<div>", "a && b", "for i := range n", "value", "fmt.Sprintf(\"%d\", i)", "path/to/file.go", "ok"}
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.Grow(n + 200)
	for b.Len() < n {
		b.WriteString(strings.Repeat("\t", r.IntN(4)))
		for w := 3 + r.IntN(8); w > 0; w-- {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
		b.WriteByte('\n')
	}
	return b.String()[:n]
}

// rawStdio is a bare JSON-RPC client of the built binary's stdio: requests
// are written as given and responses read as lines, so that the numbers
// measure the server, not a client's JSON work.
type rawStdio struct {
	in  io.WriteCloser
	out *bufio.Reader
	id  int
	pid int
}

// cpuTime is the CPU time the server process has used so far, so that a
// benchmark can report the server's work apart from the machine's load.
func (c *rawStdio) cpuTime(b *testing.B) time.Duration {
	b.Helper()
	return processCPUTime(b, c.pid)
}

// reportServerCPU reports the server's CPU time per operation since start.
func (c *rawStdio) reportServerCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((c.cpuTime(b)-start).Milliseconds())/float64(b.N), "server-cpu-ms/op")
}

func startRawStdio(b *testing.B, extra ...string) *rawStdio {
	b.Helper()
	bin := envdtest.Binary(b)
	state := filepath.Join(envdtest.ShortTempDir(b), "state")
	cmd := exec.Command(bin, append([]string{"serve", "--state-dir", state, "--log-level", "warn"}, extra...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
	})
	c := &rawStdio{in: in, out: bufio.NewReaderSize(out, 64<<20), pid: cmd.Process.Pid}
	c.roundTrip(b, `"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}`)
	if _, err := io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		b.Fatal(err)
	}
	return c
}

// request returns a JSON-RPC request line with the next id around body
// (the members after the id).
func (c *rawStdio) request(body string) []byte {
	c.id++
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,%s}`+"\n", c.id, body)
}

// send writes line and returns the response line (notifications skipped).
// The slice is valid until the next call.
func (c *rawStdio) send(b *testing.B, line []byte) []byte {
	if _, err := c.in.Write(line); err != nil {
		b.Fatal(err)
	}
	for {
		resp, err := c.out.ReadSlice('\n')
		if err != nil {
			b.Fatalf("reading a response: %v", err)
		}
		if !bytes.Contains(resp[:min(len(resp), 64)], []byte(`"method":`)) {
			return resp
		}
	}
}

func (c *rawStdio) roundTrip(b *testing.B, body string) []byte {
	return c.send(b, c.request(body))
}

// toolCallBody is the body of a tools/call of name with args.
func toolCallBody(b *testing.B, name string, args any) string {
	raw, err := json.Marshal(args)
	if err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf(`"method":"tools/call","params":{"name":%q,"arguments":%s}`, name, raw)
}

// checkToolResult fails unless resp is a successful tools/call response.
func checkToolResult(b *testing.B, resp []byte) toolResult {
	b.Helper()
	var msg struct {
		Result toolResult `json:"result"`
		Error  any        `json:"error"`
	}
	if err := json.Unmarshal(resp, &msg); err != nil || msg.Error != nil || msg.Result.IsError {
		b.Fatalf("tool call failed: %v %.500s", err, resp)
	}
	return msg.Result
}

// toolResult is a tools/call result as the benchmarks check it.
type toolResult struct {
	Content           []map[string]any `json:"content"`
	StructuredContent map[string]any   `json:"structuredContent"`
	IsError           bool             `json:"isError"`
}

// BenchmarkStdioRawPutFiles8MiB: put_files of one 8 MiB text file
// through the built binary over stdio (local sandbox). The request line is
// built once; the client does no JSON work in the loop.
func BenchmarkStdioRawPutFiles8MiB(b *testing.B) {
	c := startRawStdio(b)
	body := toolCallBody(b, "put_files", map[string]any{"files": []any{map[string]any{"path": "big.txt", "content": sourceLikeText(bigFileBytes)}}})
	checkToolResult(b, c.roundTrip(b, body))
	line := c.request(body)
	b.SetBytes(bigFileBytes)
	cpu := c.cpuTime(b)
	for b.Loop() {
		if resp := c.send(b, line); bytes.Contains(resp, []byte(`"isError":true`)) {
			b.Fatalf("put_files failed: %.500s", resp)
		}
	}
	c.reportServerCPU(b, cpu)
}

// BenchmarkStdioRawReadFiles8MiB: read_files of one 8 MiB text file
// through the built binary over stdio (local sandbox), --max-read-bytes
// 32MiB. The response is checked whole once; in the loop only its size and
// that it is not an error.
func BenchmarkStdioRawReadFiles8MiB(b *testing.B) {
	c := startRawStdio(b, "--max-read-bytes", "32MiB")
	text := sourceLikeText(bigFileBytes)
	checkToolResult(b, c.roundTrip(b, toolCallBody(b, "put_files", map[string]any{"files": []any{map[string]any{"path": "big.txt", "content": text}}})))
	body := toolCallBody(b, "read_files", map[string]any{"paths": []any{"big.txt"}, "limit": len(text)})
	if !hasText(checkToolResult(b, c.roundTrip(b, body)), text) {
		b.Fatal("read_files did not return the file's text")
	}
	line := c.request(body)
	b.SetBytes(bigFileBytes)
	var respBytes int
	cpu := c.cpuTime(b)
	for b.Loop() {
		resp := c.send(b, line)
		if len(resp) < bigFileBytes || bytes.Contains(resp, []byte(`"isError":true`)) {
			b.Fatalf("read_files failed: %.500s", resp)
		}
		respBytes = len(resp)
	}
	b.ReportMetric(float64(respBytes)/bigFileBytes, "resp/file")
	c.reportServerCPU(b, cpu)
}

// hasText reports whether a read_files result carries text: in a text
// content block or in structuredContent's files[0].content.
func hasText(res toolResult, text string) bool {
	for _, c := range res.Content {
		if c["type"] == "text" && c["text"] == text {
			return true
		}
	}
	files, _ := res.StructuredContent["files"].([]any)
	if len(files) == 0 {
		return false
	}
	f, _ := files[0].(map[string]any)
	return f["content"] == text
}

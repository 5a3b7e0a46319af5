//go:build linux

package server

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// bigTextBytes is the size of the file the large-transfer benchmarks move.
const bigTextBytes = 8 << 20

// sourceText is n bytes of text shaped like source code (indentation,
// quotes, markup), as a file an agent reads or writes.
func sourceText(n int) string {
	line := "\tif err := check(\"value\", x); err != nil { return fmt.Errorf(\"<%s>: %w\", name, err) } // a && b\n"
	return strings.Repeat(line, n/len(line)+1)[:n]
}

// BenchmarkStdioPutFiles8MiB is put_files of one 8 MiB text file over
// in-process stdio pipes (envd in-process too), the request line built once
// (no client JSON work in the loop).
func BenchmarkStdioPutFiles8MiB(b *testing.B) {
	e := newEnv(b, envOptions{noHTTP: true})
	c := e.rawStdio(b)
	line := toolCall(b, 10, "put_files", map[string]any{"files": []any{map[string]any{"path": "big.txt", "content": sourceText(bigTextBytes)}}})
	if r := c.send(b, line); r.Result == nil || r.Result.IsError {
		b.Fatalf("put_files: %+v", r)
	}
	b.SetBytes(bigTextBytes)
	for b.Loop() {
		if r := c.send(b, line); r.Result == nil || r.Result.IsError {
			b.Fatalf("put_files: %+v", r)
		}
	}
}

// BenchmarkStdioReadFiles8MiB is read_files of one 8 MiB text file over
// in-process stdio pipes; the response is decoded once, then only checked
// for its size and isError.
func BenchmarkStdioReadFiles8MiB(b *testing.B) {
	e := newEnv(b, envOptions{noHTTP: true, toolsConfig: tools.Config{MaxReadBytes: 32 << 20}})
	c := e.rawStdio(b)
	put := toolCall(b, 10, "put_files", map[string]any{"files": []any{map[string]any{"path": "big.txt", "content": sourceText(bigTextBytes)}}})
	if r := c.send(b, put); r.Result == nil || r.Result.IsError {
		b.Fatalf("put_files: %+v", r)
	}
	line := toolCall(b, 11, "read_files", map[string]any{"paths": []string{"big.txt"}})
	if r := c.send(b, line); r.Result == nil || r.Result.IsError || r.bytes < bigTextBytes {
		b.Fatalf("read_files: %d bytes", r.bytes)
	}
	b.SetBytes(bigTextBytes)
	for b.Loop() {
		if raw := c.sendRaw(b, line); len(raw) < bigTextBytes || bytes.Contains(raw, []byte(`"isError":true`)) {
			b.Fatalf("read_files: %d bytes", len(raw))
		}
	}
}

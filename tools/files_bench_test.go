//go:build linux

package tools

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// benchSize is the file size the file-transfer benchmarks move.
const benchSize = 8 << 20

func benchData(b *testing.B) []byte {
	data := make([]byte, benchSize)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	return data
}

// benchTool times calls of the tool name with args, each moving benchSize
// bytes; every call must succeed.
func benchTool(b *testing.B, h *harness, name string, args any) {
	b.SetBytes(benchSize)
	b.ResetTimer()
	for b.Loop() {
		h.ok(name, args, nil)
	}
}

// benchHandler times calls of t's handler alone with req, each moving
// benchSize bytes; every call must succeed.
func benchHandler(b *testing.B, h *harness, t Tool, req mcp.CallToolRequest) {
	ctx := WithWorkspace(context.Background(), h.ws)
	b.SetBytes(benchSize)
	for b.Loop() {
		if res, err := t.Handler(ctx, req); err != nil || res.IsError {
			b.Fatalf("%v %s", err, resultText(res))
		}
	}
}

// BenchmarkPutFiles writes one 8 MiB binary file through put_files (base64
// in the JSON arguments, the MCP round trip, envd upload and rename).
func BenchmarkPutFiles(b *testing.B) {
	h := newHarness(b, harnessOptions{config: Config{MaxPutBytes: 2 * benchSize}})
	args := map[string]any{"files": []map[string]any{{
		"path": "bench.bin", "content": base64.StdEncoding.EncodeToString(benchData(b)), "encoding": "base64",
	}}}
	h.ok("put_files", args, nil) // sandbox creation outside the timing
	benchTool(b, h, "put_files", args)
}

// BenchmarkReadFiles reads one 8 MiB binary file through read_files (envd
// ranged download, base64 in the result, the MCP round trip).
func BenchmarkReadFiles(b *testing.B) {
	h := newHarness(b, harnessOptions{config: Config{MaxReadBytes: benchSize}})
	h.sbWrite("bench.bin", string(benchData(b)))
	args := map[string]any{"paths": []string{"bench.bin"}}
	benchTool(b, h, "read_files", args)
}

// BenchmarkPutFilesHandler is BenchmarkPutFiles without the MCP layer
// (JSON-RPC encoding, transport): the tool's handler alone (schema
// validation included), from raw JSON arguments.
func BenchmarkPutFilesHandler(b *testing.B) {
	h := newHarness(b, harnessOptions{config: Config{MaxPutBytes: 2 * benchSize}})
	put := PutFiles(h.deps)
	req := rawCallRequest("put_files", `{"files":[{"path":"bench.bin","encoding":"base64","content":"`+base64.StdEncoding.EncodeToString(benchData(b))+`"}]}`)
	benchHandler(b, h, put, req)
}

// BenchmarkReadFilesHandler is BenchmarkReadFiles without the MCP layer.
func BenchmarkReadFilesHandler(b *testing.B) {
	h := newHarness(b, harnessOptions{config: Config{MaxReadBytes: benchSize}})
	h.sbWrite("bench.bin", string(benchData(b)))
	read := ReadFiles(h.deps)
	req := rawCallRequest("read_files", `{"paths":["bench.bin"]}`)
	benchHandler(b, h, read, req)
}

// BenchmarkCollectOutputs copies one 8 MiB file from the sandbox into the
// host artifact store (download, SHA-256, temporary file, rename).
func BenchmarkCollectOutputs(b *testing.B) {
	h := newHarness(b, harnessOptions{config: Config{ArtifactsDir: b.TempDir()}})
	h.sbWrite("out/bench.bin", string(benchData(b)))
	args := map[string]any{"globs": []string{"out/*.bin"}}
	benchTool(b, h, "collect_outputs", args)
}

// BenchmarkStageInputsHost copies one 8 MiB file from a host stage root into
// the sandbox (upload to a temporary, rename).
func BenchmarkStageInputsHost(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bench.bin"), benchData(b), 0o644); err != nil {
		b.Fatal(err)
	}
	h := newHarness(b, harnessOptions{config: Config{StageRoots: map[string]string{"data": dir}}})
	args := map[string]any{"inputs": []map[string]any{{"from": "host://data/bench.bin"}}}
	h.ok("stage_inputs", args, nil)
	benchTool(b, h, "stage_inputs", args)
}

// BenchmarkCopyBaseline is the floor the transfer benchmarks compare with:
// cp of the same 8 MiB between two files on the host.
func BenchmarkCopyBaseline(b *testing.B) {
	dir := b.TempDir()
	src, dst := filepath.Join(dir, "src.bin"), filepath.Join(dir, "dst.bin")
	if err := os.WriteFile(src, benchData(b), 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchSize)
	b.ResetTimer()
	for b.Loop() {
		// The cp(1) a person would use, process start included.
		if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v: %s", err, out)
		}
	}
}

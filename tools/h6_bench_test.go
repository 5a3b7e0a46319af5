package tools

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	envdclient "github.com/sandbox-mcp/sandbox-mcp/envd/client"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// benchSize is the file size the file-transfer benchmarks move.
const benchSize = 8 << 20

// benchServer is the harness's setup for benchmarks (newHarness takes a
// *testing.T): a real MCP server with every tool, schema validation on, a
// managetest sandbox and an in-process client.
type benchServer struct {
	b       *testing.B
	manager *manage.Manager
	client  *client.Client
	ws      Workspace
}

func newBenchServer(b *testing.B, cfg Config) *benchServer {
	b.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := manage.New(manage.Options{Provider: managetest.New(b), AutoRecreate: true, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	ws := Workspace{Key: "bench"}
	_, _, c := newToolServer(b, m, cfg, ws)
	return &benchServer{b: b, manager: m, client: c, ws: ws}
}

// call invokes a tool that must succeed.
func (s *benchServer) call(name string, args any) *mcp.CallToolResult {
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := s.client.CallTool(context.Background(), req)
	if err != nil {
		s.b.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		s.b.Fatalf("%s failed: %s", name, resultText(res))
	}
	return res
}

// upload writes data to a workspace file through envd directly.
func (s *benchServer) upload(rel string, data []byte) {
	l, err := s.manager.Acquire(context.Background(), s.ws.Key, false)
	if err != nil {
		s.b.Fatal(err)
	}
	defer l.Release()
	if err := l.Client.Upload(context.Background(), filepath.Join(l.Sandbox.Workdir, rel), bytes.NewReader(data), envdclient.UploadOptions{}); err != nil {
		s.b.Fatal(err)
	}
}

func benchData(b *testing.B) []byte {
	data := make([]byte, benchSize)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkPutFiles writes one 8 MiB binary file through put_files (base64
// in the JSON arguments, the MCP round trip, envd upload and rename).
func BenchmarkPutFiles(b *testing.B) {
	s := newBenchServer(b, Config{MaxPutBytes: 2 * benchSize})
	args := map[string]any{"files": []map[string]any{{
		"path": "bench.bin", "content": base64.StdEncoding.EncodeToString(benchData(b)), "encoding": "base64",
	}}}
	s.call("put_files", args) // sandbox creation outside the timing
	b.SetBytes(benchSize)
	b.ResetTimer()
	for b.Loop() {
		s.call("put_files", args)
	}
}

// BenchmarkReadFiles reads one 8 MiB binary file through read_files (envd
// ranged download, base64 in the result, the MCP round trip).
func BenchmarkReadFiles(b *testing.B) {
	s := newBenchServer(b, Config{MaxReadBytes: benchSize})
	s.call("workspace_info", nil)
	s.upload("bench.bin", benchData(b))
	args := map[string]any{"paths": []string{"bench.bin"}}
	b.SetBytes(benchSize)
	b.ResetTimer()
	for b.Loop() {
		s.call("read_files", args)
	}
}

// BenchmarkPutFilesHandler is BenchmarkPutFiles without the MCP layer
// (JSON-RPC encoding, transport, schema validation): the tool's handler
// alone, from raw JSON arguments.
func BenchmarkPutFilesHandler(b *testing.B) {
	s := newBenchServer(b, Config{MaxPutBytes: 2 * benchSize})
	put := PutFiles(NewDeps(s.manager, Config{MaxPutBytes: 2 * benchSize}, nil))
	req := rawCallRequest("put_files", `{"files":[{"path":"bench.bin","encoding":"base64","content":"`+base64.StdEncoding.EncodeToString(benchData(b))+`"}]}`)
	ctx := WithWorkspace(context.Background(), s.ws)
	b.SetBytes(benchSize)
	for b.Loop() {
		if res, err := put.Handler(ctx, req); err != nil || res.IsError {
			b.Fatalf("%v %s", err, resultText(res))
		}
	}
}

// BenchmarkReadFilesHandler is BenchmarkReadFiles without the MCP layer.
func BenchmarkReadFilesHandler(b *testing.B) {
	s := newBenchServer(b, Config{MaxReadBytes: benchSize})
	s.call("workspace_info", nil)
	s.upload("bench.bin", benchData(b))
	read := ReadFiles(NewDeps(s.manager, Config{MaxReadBytes: benchSize}, nil))
	req := rawCallRequest("read_files", `{"paths":["bench.bin"]}`)
	ctx := WithWorkspace(context.Background(), s.ws)
	b.SetBytes(benchSize)
	for b.Loop() {
		if res, err := read.Handler(ctx, req); err != nil || res.IsError {
			b.Fatalf("%v %s", err, resultText(res))
		}
	}
}

// BenchmarkCollectOutputs copies one 8 MiB file from the sandbox into the
// host artifact store (download, SHA-256, temporary file, rename).
func BenchmarkCollectOutputs(b *testing.B) {
	s := newBenchServer(b, Config{ArtifactsDir: b.TempDir()})
	s.call("workspace_info", nil)
	s.upload("out/bench.bin", benchData(b))
	args := map[string]any{"globs": []string{"out/*.bin"}}
	b.SetBytes(benchSize)
	b.ResetTimer()
	for b.Loop() {
		s.call("collect_outputs", args)
	}
}

// BenchmarkStageInputsHost copies one 8 MiB file from a host stage root into
// the sandbox (upload to a temporary, rename).
func BenchmarkStageInputsHost(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bench.bin"), benchData(b), 0o644); err != nil {
		b.Fatal(err)
	}
	s := newBenchServer(b, Config{StageRoots: map[string]string{"data": dir}})
	args := map[string]any{"inputs": []map[string]any{{"from": "host://data/bench.bin"}}}
	s.call("stage_inputs", args)
	b.SetBytes(benchSize)
	b.ResetTimer()
	for b.Loop() {
		s.call("stage_inputs", args)
	}
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

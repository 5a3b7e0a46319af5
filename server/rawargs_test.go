//go:build linux

package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// splitProbeTool reports whether the transport split its call's arguments
// off the message, and the arguments mcp-go handed it.
func splitProbeTool() tools.Tool {
	def := mcp.NewToolWithRawSchema("test_split", "report whether the arguments were split", json.RawMessage(`{"type":"object"}`))
	return tools.Tool{Toolset: tools.ToolsetAdmin, Def: def, SplitArguments: true, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		out := splitProbe{Split: tools.HasArguments(ctx, "test_split"), Arguments: req.GetArguments()}
		raw, _ := json.Marshal(out)
		return mcp.NewToolResultStructured(out, string(raw)), nil
	}}
}

type splitProbe struct {
	Split     bool           `json:"split"`
	Arguments map[string]any `json:"arguments"`
}

// bigTextTool returns n bytes of text, and cannot return less.
func bigTextTool() tools.Tool {
	def := mcp.NewToolWithRawSchema("test_big", "return n bytes of text", json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`))
	return tools.Tool{Toolset: tools.ToolsetAdmin, Def: def, Handler: func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n, err := req.RequireInt("n")
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		return mcp.NewToolResultText(strings.Repeat("x", n)), nil
	}}
}

// escapeHeavyText is n bytes of text with quotes, backslashes, control
// characters, non-ASCII and the JavaScript line separators.
func escapeHeavyText(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%d \"q\" \\ \t<&> é 😀 \u2028 \x01\n", i)
	}
	return b.String()
}

// TestArgumentsSplitOnEveryTransport: over stdio and HTTP, in both
// revisions, a call of a tool that takes split arguments gets them split off
// the message (mcp-go sees {}), and a large file goes in and comes back out
// unchanged.
func TestArgumentsSplitOnEveryTransport(t *testing.T) {
	e := newEnv(t, envOptions{toolsConfig: tools.Config{MaxReadBytes: 4 << 20}})
	text := escapeHeavyText(3 << 20)
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) *mcpClient
	}{
		{"stdio 2025-11-25", func(t *testing.T) *mcpClient { c, _ := e.stdioClient(t, context.Background(), true); return c }},
		{"stdio 2026-07-28", func(t *testing.T) *mcpClient { c, _ := e.stdioClient(t, context.Background(), false); return c }},
		{"HTTP 2025-11-25", func(t *testing.T) *mcpClient { return e.client(t, clientOptions{legacy: true}) }},
		{"HTTP 2026-07-28", func(t *testing.T) *mcpClient { return e.client(t, clientOptions{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.client(t)
			var probe splitProbe
			c.ok(t, "test_split", map[string]any{"pad": strings.Repeat("p", 5000)}, &probe)
			if !probe.Split || len(probe.Arguments) != 0 {
				t.Fatalf("probe: %+v, want split arguments and {} for mcp-go", probe)
			}
			path := strings.ReplaceAll(tc.name, " ", "-") + ".txt"
			var put struct {
				Written []struct {
					Bytes int `json:"bytes"`
				} `json:"written"`
			}
			c.ok(t, "put_files", map[string]any{"files": []any{map[string]any{"path": path, "content": text}}}, &put)
			if len(put.Written) != 1 || put.Written[0].Bytes != len(text) {
				t.Fatalf("put_files: %+v", put)
			}
			var read struct {
				Files []struct {
					ContentIndex int  `json:"content_index"`
					Truncated    bool `json:"truncated"`
				} `json:"files"`
			}
			res := c.ok(t, "read_files", map[string]any{"paths": []string{path}, "limit": len(text)}, &read) // exact bytes, past the default budget
			if len(read.Files) != 1 || read.Files[0].Truncated || read.Files[0].ContentIndex < 1 || read.Files[0].ContentIndex >= len(res.Content) {
				t.Fatalf("read_files: %+v", read)
			}
			if got, _ := mcp.AsTextContent(res.Content[read.Files[0].ContentIndex]); got == nil || got.Text != text {
				t.Fatal("read_files did not return the file's text")
			}
		})
	}
}

// rawStdio is a stdio session driven line by line.
type rawStdio struct {
	in  io.WriteCloser
	out *bufio.Reader
}

func (e *testEnv) rawStdio(t testing.TB) *rawStdio {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.srv.ServeStdio(context.Background(), inR, outW)
		outW.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-done:
		case <-time.After(failTimeout):
			t.Error("ServeStdio did not return after stdin ended")
		}
	})
	c := &rawStdio{in: inW, out: bufio.NewReaderSize(outR, 64<<20)}
	c.send(t, initializeBody)
	c.write(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *rawStdio) write(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// stdioReply is a response line, decoded, and its length.
type stdioReply struct {
	ID     any `json:"id"`
	Result *struct {
		Content           []map[string]any `json:"content"`
		StructuredContent json.RawMessage  `json:"structuredContent"`
		IsError           bool             `json:"isError"`
	} `json:"result"`
	Error *struct {
		Code int `json:"code"`
	} `json:"error"`
	bytes int
}

// send writes line and returns the next response (notifications skipped).
func (c *rawStdio) send(t testing.TB, line string) stdioReply {
	t.Helper()
	raw := c.sendRaw(t, line)
	var reply stdioReply
	if err := json.Unmarshal(raw, &reply); err != nil {
		t.Fatalf("stdout carried a line that is not JSON: %v %.300q", err, raw)
	}
	reply.bytes = len(raw)
	return reply
}

// sendRaw writes line and returns the next line that is not a
// notification, undecoded; it is valid until the next call.
func (c *rawStdio) sendRaw(t testing.TB, line string) []byte {
	t.Helper()
	c.write(t, line)
	for {
		raw, err := c.out.ReadSlice('\n')
		if err != nil {
			t.Fatalf("reading stdout: %v", err)
		}
		if !strings.Contains(string(raw[:min(len(raw), 64)]), `"method":`) {
			return raw
		}
	}
}

func toolCall(t testing.TB, id int, name string, args any) string {
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, name, raw)
}

// TestStdioWire drives a stdio session with raw lines: parse errors are
// answered as mcp-go answered them, split and whole calls give the same
// results, and no tool result exceeds the message limit.
func TestStdioWire(t *testing.T) {
	const limit = 256 << 10
	e := newEnv(t, envOptions{noHTTP: true, maxStdioMessage: limit, toolsConfig: tools.Config{MaxReadBytes: 1 << 20}})
	c := e.rawStdio(t)

	if r := c.send(t, "not JSON"); r.Error == nil || r.Error.Code != mcp.PARSE_ERROR || r.ID != nil {
		t.Fatalf("a line that is not JSON: %+v", r)
	}
	if r := c.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"put_files","arguments":{"files":tru}}}`); r.Error == nil || r.Error.Code != mcp.PARSE_ERROR {
		t.Fatalf("arguments that are not JSON: %+v", r)
	}

	text := escapeHeavyText(200 << 10)
	split := toolCall(t, 3, "put_files", map[string]any{"files": []any{map[string]any{"path": "a.txt", "content": text}}})
	// "Arguments" is read by mcp-go (encoding/json ignores case) but not
	// split: the call is served whole, with the same result.
	whole := strings.Replace(toolCall(t, 4, "put_files", map[string]any{"files": []any{map[string]any{"path": "a.txt", "content": text}}}), `"arguments"`, `"Arguments"`, 1)
	for _, line := range []string{split, whole} {
		r := c.send(t, line)
		if r.Result == nil || r.Result.IsError || !strings.Contains(string(r.Result.StructuredContent), fmt.Sprintf(`"bytes":%d`, len(text))) {
			t.Fatalf("put_files: %+v", r)
		}
	}

	// read_files fits its result into the limit and says how to go on.
	r := c.send(t, toolCall(t, 5, "read_files", map[string]any{"paths": []string{"a.txt"}}))
	if r.Result == nil || r.Result.IsError || r.bytes > limit {
		t.Fatalf("read_files: %d bytes, %+v", r.bytes, r)
	}
	var read struct {
		Notices []string `json:"notices"`
		Files   []struct {
			Truncated  bool   `json:"truncated"`
			NextOffset *int64 `json:"next_offset"`
		} `json:"files"`
	}
	if err := json.Unmarshal(r.Result.StructuredContent, &read); err != nil || len(read.Files) != 1 || !read.Files[0].Truncated || read.Files[0].NextOffset == nil ||
		!strings.Contains(strings.Join(read.Notices, " "), "messages of at most") {
		t.Fatalf("read_files under the limit: %s", r.Result.StructuredContent)
	}

	// A result that cannot shrink becomes an error that says why.
	r = c.send(t, toolCall(t, 6, "test_big", map[string]any{"n": limit}))
	if r.Result == nil || !r.Result.IsError || len(r.Result.Content) != 1 || !strings.Contains(fmt.Sprint(r.Result.Content[0]["text"]), "more than the") {
		t.Fatalf("an oversized result: %+v", r)
	}
	if r := c.send(t, toolCall(t, 7, "test_big", map[string]any{"n": 10})); r.Result == nil || r.Result.IsError {
		t.Fatalf("a small result after an oversized one: %+v", r)
	}
}

// TestHTTPSplitBodies: a tools/call body over the limit still gets 413, one
// that is not JSON the parse error mcp-go gives, whether or not it would
// have been split.
func TestHTTPSplitBodies(t *testing.T) {
	e := newEnv(t, envOptions{maxBody: 64 << 10})
	sid := e.rawSession(t, nil)
	session := map[string]string{mcpserver.HeaderKeySessionID: sid, mcp.HeaderProtocolVersion: mcp.ProtocolVersion20251125}
	stateless := map[string]string{mcp.HeaderProtocolVersion: mcp.ProtocolVersion20260728, "Mcp-Method": "tools/call", "Mcp-Name": "put_files"}
	big := toolCall(t, 2, "put_files", map[string]any{"files": []any{map[string]any{"path": "a", "content": strings.Repeat("x", 100<<10)}}})
	for name, headers := range map[string]map[string]string{"session": session, "stateless": stateless} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, e.base+"/mcp", struct{ *strings.Reader }{strings.NewReader(big)})
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		req.ContentLength = -1
		resp, err := (&http.Client{Transport: e.rt}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: oversized chunked tools/call: %d %s, want 413", name, resp.StatusCode, b)
		}
		bad := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"put_files","arguments":{"files":tru}}}`
		if resp, body := e.rawRequest(t, http.MethodPost, "/mcp", bad, headers); !strings.Contains(body, fmt.Sprintf(`"code":%d`, mcp.PARSE_ERROR)) {
			t.Errorf("%s: arguments that are not JSON: %d %s", name, resp.StatusCode, body)
		}
	}
}

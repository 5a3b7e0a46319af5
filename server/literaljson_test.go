package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

func TestUnescapeHTML(t *testing.T) {
	for _, tc := range []struct{ in, out, rest string }{
		{`{"a":"x"}`, `{"a":"x"}`, ""},
		{`"\u003ca\u003e \u0026"`, `"<a> &"`, ""},
		{`"\\u003c"`, `"\\u003c"`, ""},          // an escaped backslash, then text
		{`"\\\u003c"`, `"\\<"`, ""},             // an escaped backslash, then an escape
		{`"\u00e9\n\u003e"`, `"\u00e9\n>"`, ""}, // other escapes stay
		{`"ab\u00`, `"ab`, `\u00`},              // split: held back
		{`"ab\`, `"ab`, `\`},
	} {
		out, rest := unescapeHTML([]byte(tc.in))
		if string(out) != tc.out || string(rest) != tc.rest {
			t.Errorf("unescapeHTML(%s) = %s, %q; want %s, %q", tc.in, out, rest, tc.out, tc.rest)
		}
	}
}

// TestLiteralWriterSplits: an escape split across writes at any point is
// still undone.
func TestLiteralWriterSplits(t *testing.T) {
	in := `{"t":"\u003cmodule\u003e \u0026\u0026 \\u003c"}`
	want := `{"t":"<module> && \\u003c"}`
	for cut := 0; cut <= len(in); cut++ {
		rec := &bodyRecorder{header: http.Header{}}
		lw := &literalWriter{ResponseWriter: rec}
		_, _ = lw.Write([]byte(in[:cut]))
		_, _ = lw.Write([]byte(in[cut:]))
		lw.flushPending()
		if rec.body.String() != want {
			t.Fatalf("cut at %d: %s", cut, rec.body.String())
		}
	}
}

type bodyRecorder struct {
	header http.Header
	body   bytes.Buffer
}

func (r *bodyRecorder) Header() http.Header         { return r.header }
func (r *bodyRecorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *bodyRecorder) WriteHeader(int)             {}

// literalCall is a workspace_exec call whose output and arguments hold the
// characters encoding/json escapes for HTML.
const literalCall = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"workspace_exec","arguments":{"command":"printf '<a> & <b>'"}%s}}`

// checkLiteral fails unless the raw response carries <, > and & as they are,
// in the text and in structuredContent.
func checkLiteral(t *testing.T, transport, raw string) {
	t.Helper()
	for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
		if strings.Contains(raw, esc) {
			t.Errorf("%s: the response escapes HTML (%s): %s", transport, esc, raw)
		}
	}
	if !strings.Contains(raw, `"stdout":"<a> & <b>"`) || !strings.Contains(raw, `\n<a> & <b>"`) {
		t.Errorf("%s: stdout is not literal in structuredContent and text: %s", transport, raw)
	}
}

// TestWireLiteralHTTP: over HTTP, as JSON and as an SSE stream (progress),
// results reach the client with <, > and & unescaped.
func TestWireLiteralHTTP(t *testing.T) {
	e := newEnv(t, envOptions{})
	sid := e.rawSession(t, nil)
	e.initialized(t, sid)
	headers := map[string]string{mcpserver.HeaderKeySessionID: sid, mcp.HeaderProtocolVersion: mcp.ProtocolVersion20251125}
	resp, body := e.rawRequest(t, http.MethodPost, "/mcp", strings.Replace(literalCall, "%s", "", 1), headers)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/call: %d %s", resp.StatusCode, body)
	}
	checkLiteral(t, "HTTP JSON", body)
	resp, body = e.rawRequest(t, http.MethodPost, "/mcp", strings.Replace(literalCall, "%s", `,"_meta":{"progressToken":"p<1>"}`, 1), headers)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/call with progress: %d %s", resp.StatusCode, body)
	}
	checkLiteral(t, "HTTP "+resp.Header.Get("Content-Type"), body)
}

// TestWireLiteralStdio: over stdio, results reach the client with <, > and
// & unescaped.
func TestWireLiteralStdio(t *testing.T) {
	e := newEnv(t, envOptions{noHTTP: true})
	ctx, cancel := context.WithTimeout(context.Background(), failTimeout)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		_ = e.srv.ServeStdio(ctx, inR, outW)
		outW.Close()
	}()
	defer inW.Close()
	go func() {
		_, _ = io.WriteString(inW, initializeBody+"\n"+`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+strings.Replace(literalCall, "%s", "", 1)+"\n")
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		b := new(bytes.Buffer)
		buf := make([]byte, 4096)
		for {
			n, err := outR.Read(buf)
			b.Write(buf[:n])
			for {
				line, rest, ok := bytes.Cut(b.Bytes(), []byte{'\n'})
				if !ok {
					break
				}
				lines <- string(line)
				b = bytes.NewBuffer(append([]byte(nil), rest...))
			}
			if err != nil {
				return
			}
		}
	}()
	timeout := time.After(failTimeout)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("stdout ended before the result")
			}
			if strings.Contains(line, `"id":2`) {
				checkLiteral(t, "stdio", line)
				return
			}
		case <-timeout:
			t.Fatal("no result")
		}
	}
}

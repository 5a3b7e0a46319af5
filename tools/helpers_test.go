//go:build linux

package tools

import (
	"context"
	"encoding/json"
	"io"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// The helpers below reach the sandbox through the envd client directly
// (never through workspace_exec), so file tool tests check real effects.

// sbPath returns the absolute sandbox path of a workspace-relative path.
func (h *harness) sbPath(rel string) string {
	h.t.Helper()
	return path.Join(h.lease().Sandbox.Workdir, rel)
}

// sbRead returns the content of a workspace file.
func (h *harness) sbRead(rel string) []byte {
	h.t.Helper()
	dl, err := h.lease().Client.Download(context.Background(), h.sbPath(rel))
	if err != nil {
		h.t.Fatalf("download %s: %v", rel, err)
	}
	defer dl.Close()
	b, err := io.ReadAll(dl)
	if err != nil {
		h.t.Fatalf("download %s: %v", rel, err)
	}
	return b
}

// sbStat describes a workspace path (a symlink itself).
func (h *harness) sbStat(rel string) (envdclient.Entry, error) {
	h.t.Helper()
	return h.lease().Client.Stat(context.Background(), h.sbPath(rel))
}

// sbExists reports whether a workspace path exists.
func (h *harness) sbExists(rel string) bool {
	h.t.Helper()
	_, err := h.sbStat(rel)
	if err != nil && !envdclient.IsNotFound(err) {
		h.t.Fatalf("stat %s: %v", rel, err)
	}
	return err == nil
}

// sbWrite writes a workspace file, creating parents.
func (h *harness) sbWrite(rel, content string) {
	h.t.Helper()
	if err := h.lease().Client.Upload(context.Background(), h.sbPath(rel), strings.NewReader(content), envdclient.UploadOptions{}); err != nil {
		h.t.Fatalf("upload %s: %v", rel, err)
	}
}

// sbRun runs argv in the sandbox (for setup such as symlinks and fifos).
func (h *harness) sbRun(argv ...string) {
	h.t.Helper()
	l := h.lease()
	res, err := l.Client.Run(context.Background(), envdclient.Command{Cmd: argv[0], Args: argv[1:], Cwd: l.Sandbox.Workdir}, envdclient.RunOptions{})
	if err != nil {
		h.t.Fatalf("%v: %v", argv, err)
	}
	if res.ExitCode != 0 {
		h.t.Fatalf("%v: exit %d: %s", argv, res.ExitCode, res.Stderr.Bytes())
	}
}

// killBehindTheTools kills the sandbox process pid through envd, not the
// tools, and waits until the follower of its entry e has seen it end.
func (h *harness) killBehindTheTools(pid uint32, e *procEntry) {
	h.t.Helper()
	if err := h.lease().Client.SendSignal(context.Background(), envdclient.ByPid(pid), envdclient.SIGKILL); err != nil {
		h.t.Fatal(err)
	}
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		h.t.Fatal("the follower did not see the process end")
	}
}

// mustContain fails unless s contains every want.
func mustContain(t *testing.T, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("text does not contain %q:\n%s", w, s)
		}
	}
}

// imageContents returns the image blocks of a result.
func imageContents(res *mcp.CallToolResult) []mcp.ImageContent {
	var out []mcp.ImageContent
	for _, c := range res.Content {
		if ic, ok := mcp.AsImageContent(c); ok {
			out = append(out, *ic)
		}
	}
	return out
}

// okAs calls a tool that must succeed and decodes its structured content
// into a fresh T (decoding into a reused value would keep stale fields).
func okAs[T any](h *harness, name string, args any) (T, *mcp.CallToolResult) {
	h.t.Helper()
	var out T
	res := h.ok(name, args, &out)
	return out, res
}

// readOne reads one file with read_files and returns its entry.
func readOne(h *harness, args map[string]any) readFileEntry {
	h.t.Helper()
	out, _ := okAs[readFilesOutput](h, "read_files", args)
	if len(out.Files) != 1 {
		h.t.Fatalf("read_files returned %d entries", len(out.Files))
	}
	return out.Files[0]
}

// rawCallRequest builds a tools/call request with raw JSON arguments, for
// calling a handler directly (no MCP layer in between; the handler still
// validates the arguments against its schema).
func rawCallRequest(name, rawArgs string) mcp.CallToolRequest {
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = json.RawMessage(rawArgs)
	return req
}

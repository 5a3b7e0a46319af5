//go:build linux

package tools

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/managetest"
)

// FuzzDecodeFileTools feeds arbitrary JSON to the handlers of put_files,
// read_files, list_files, stage_inputs, collect_outputs, workspace_info and
// workspace_reset, without the MCP layer in between (each handler still
// validates against its schema, then decodes): a handler must never panic
// and must always return a result.
// The sandbox is real, with a stage root and an artifact store, so decoded
// calls reach the code behind the checks too.
func FuzzDecodeFileTools(f *testing.F) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := managetest.New(f)
	m, err := manage.New(manage.Options{Provider: p, AutoRecreate: true, Logger: log})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	stage := f.TempDir()
	if err := os.WriteFile(filepath.Join(stage, "in.txt"), []byte("input"), 0o644); err != nil {
		f.Fatal(err)
	}
	d := NewDeps(m, Config{
		MaxPutBytes: 1 << 16, MaxReadBytes: 1 << 12,
		StageRoots: map[string]string{"data": stage}, ArtifactsDir: f.TempDir(),
	}, log)
	tools := []Tool{PutFiles(d), ReadFiles(d), ListFiles(d), StageInputs(d), CollectOutputs(d), WorkspaceInfo(d), WorkspaceReset(d)}
	ctx := WithWorkspace(context.Background(), Workspace{Key: "fuzz"})

	seeds := []struct {
		tool uint8
		args string
	}{
		{0, `{"files":[{"path":"a.txt","content":"hi"},{"path":"b/c.bin","content":"AAEC","encoding":"base64","mode":"0755"}]}`},
		{0, `{"files":[{"path":"../x","content":""}]}`},
		{0, `{"files":[{"path":"a","content":"!!","encoding":"base64"}]}`},
		{0, `{"files":null}`},
		{1, `{"paths":["a.txt","missing","/etc/passwd"],"offset":1,"limit":2}`},
		{1, `{"paths":["a.txt"],"start_line":1,"max_lines":3,"encoding":"text"}`},
		{1, `{"paths":["a.txt"],"offset":-5}`},
		{2, `{"path":".","depth":3,"glob":"**/*.txt","max_entries":2}`},
		{2, `{"glob":"[","depth":-1}`},
		{3, `{"inputs":[{"from":"host://data/in.txt"},{"from":"workspace://a.txt","to":"l","mode":"link"}]}`},
		{3, `{"inputs":[{"from":"artifact://a.txt"},{"from":"host://data/../../etc"}]}`},
		{4, `{"globs":["**"],"inline":true,"max_files":3,"name_prefix":"p"}`},
		{4, `{"globs":["/abs","../x"],"max_bytes":-1}`},
		{5, `{}`},
		{5, `null`},
		{6, `{"confirm":false}`},
		{6, `{"confirm":"yes"}`},
		{0, `not json`},
		{1, `{"paths":[1,2]}`},
		{2, `{"unknown":1}`},
	}
	for _, s := range seeds {
		f.Add(s.tool, []byte(s.args))
	}
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		tool := tools[int(which)%len(tools)]
		res, err := tool.Handler(ctx, rawCallRequest(tool.Def.Name, string(args)))
		if err != nil {
			t.Fatalf("%s: handler error %v", tool.Def.Name, err)
		}
		if res == nil || len(res.Content) == 0 {
			t.Fatalf("%s: empty result for %q", tool.Def.Name, args)
		}
	})
}

// Package tools is sandbox-mcp's tool registry: every tool the model sees,
// grouped into toolsets, each built by one constructor from typed input and
// output structs whose JSON schemas come from invopop/jsonschema, with
// explicit annotations, argument checks, timeout clamping, output caps, and
// the agent notices that lead every result.
//
// Errors travel on two channels, as MCP intends: anything the model can act
// on (a bad argument, a missing file, a timeout, a recreated sandbox) comes
// back as a result with isError and text that says what to do next; only
// protocol faults are JSON-RPC errors. Server faults are logged with detail
// and reach the model as a short isError result.
package tools

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// The toolsets. A deployment can expose only some of them (Config.Toolsets).
const (
	ToolsetExec     = "exec"
	ToolsetProcess  = "process"
	ToolsetFiles    = "files"
	ToolsetTransfer = "transfer"
	ToolsetAdmin    = "admin"
)

// ToolsetInfo describes a toolset for people (sandbox-mcp tools, the README).
type ToolsetInfo struct {
	Name        string
	Description string
}

// Toolsets lists every toolset in display order.
var Toolsets = []ToolsetInfo{
	{ToolsetExec, "run commands in the workspace"},
	{ToolsetProcess, "follow, feed and stop background processes"},
	{ToolsetFiles, "write, read, list, edit and search workspace files"},
	{ToolsetTransfer, "bring inputs in, take outputs out (host roots and the artifact store)"},
	{ToolsetAdmin, "describe or reset the workspace's sandbox"},
}

// Tool is one registered tool: its MCP definition, toolset and handler.
type Tool struct {
	Toolset string
	Def     mcp.Tool
	Handler server.ToolHandlerFunc
	// SplitArguments says the handler takes its arguments from the call's
	// context when the transport split them off the message (SplitToolCall,
	// WithArguments), as every tool of this package does; only such tools'
	// calls are split.
	SplitArguments bool
}

// ReadOnly reports whether the tool changes nothing.
func (t Tool) ReadOnly() bool {
	return t.Def.Annotations.ReadOnlyHint != nil && *t.Def.Annotations.ReadOnlyHint
}

// constructors lists every tool's constructor, in the order tools are listed.
var constructors = []func(*Deps) Tool{
	WorkspaceExec,
	ProcessOutput,
	ProcessInput,
	ProcessSignal,
	ProcessList,
	PutFiles,
	ReadFiles,
	ListFiles,
	EditFile,
	SearchFiles,
	StageInputs,
	CollectOutputs,
	WorkspaceInfo,
	WorkspaceReset,
}

// All returns every tool.
func All(d *Deps) []Tool {
	out := make([]Tool, 0, len(constructors))
	for _, c := range constructors {
		out = append(out, c(d))
	}
	return out
}

// Selected returns the tools d.Config selects (toolsets, read-only). An
// unknown toolset name is an error that lists the known ones.
func Selected(d *Deps) ([]Tool, error) {
	want, err := wantedToolsets(d.Config.Toolsets)
	if err != nil {
		return nil, err
	}
	var out []Tool
	for _, t := range All(d) {
		if want != nil && !want[t.Toolset] {
			continue
		}
		if d.Config.ReadOnly && !t.ReadOnly() {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// wantedToolsets reads Config.Toolsets: the toolsets named, or nil for all
// (none named, or "all"). Unknown names are left out and reported in the
// error, which lists the known ones.
func wantedToolsets(names []string) (map[string]bool, error) {
	want := map[string]bool{}
	var unknown error
	for _, name := range names {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case name == "all":
			return nil, unknown
		case slices.ContainsFunc(Toolsets, func(ts ToolsetInfo) bool { return ts.Name == name }):
			want[name] = true
		case unknown == nil:
			known := make([]string, len(Toolsets))
			for i, ts := range Toolsets {
				known[i] = ts.Name
			}
			unknown = fmt.Errorf("unknown toolset %q (known: %s, or all)", name, strings.Join(known, ", "))
		}
	}
	if len(want) == 0 {
		return nil, unknown
	}
	return want, unknown
}

// Register adds tools to s.
func Register(s *server.MCPServer, tools []Tool) {
	for _, t := range tools {
		s.AddTool(t.Def, t.Handler)
	}
}

// Workspace identifies the workspace a call acts on. The server binds it to
// each call (over stdio, the one workspace it serves; over HTTP, one named
// by the principal plus the session or the Sandbox-Workspace header).
type Workspace struct {
	// Key is the Manager's workspace key.
	Key string
	// Named workspaces survive sessions; anonymous ones die with them.
	Named bool
}

type workspaceKey struct{}

// WithWorkspace returns ctx bound to ws.
func WithWorkspace(ctx context.Context, ws Workspace) context.Context {
	return context.WithValue(ctx, workspaceKey{}, ws)
}

// WorkspaceFrom returns the workspace bound to ctx, or a named "default".
func WorkspaceFrom(ctx context.Context) Workspace {
	if ws, ok := ctx.Value(workspaceKey{}).(Workspace); ok && ws.Key != "" {
		return ws
	}
	return Workspace{Key: "default", Named: true}
}

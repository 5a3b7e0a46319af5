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
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// The toolsets. A deployment can expose only some of them (--toolsets).
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
	{ToolsetFiles, "write, read and list workspace files"},
	{ToolsetTransfer, "bring inputs in, take outputs out (host roots and the artifact store)"},
	{ToolsetAdmin, "describe or reset the workspace's sandbox"},
}

// Config holds the operator's limits and choices.
type Config struct {
	// DefaultTimeout applies when the model gives no timeout_sec.
	DefaultTimeout time.Duration
	// MaxTimeout is the ceiling for a model-supplied timeout_sec; larger
	// values are clamped to it and the result says so.
	MaxTimeout time.Duration
	// OutputLimit is the inline output per stream, in bytes (head + tail).
	OutputLimit int
	// MaxPutBytes caps the decoded bytes of one put_files call.
	MaxPutBytes int64
	// MaxReadBytes caps the bytes one read_files call returns.
	MaxReadBytes int64
	// StageRoots maps NAME to an absolute host directory readable through
	// host://NAME/… in stage_inputs. Nothing else on the host is.
	StageRoots map[string]string
	// ArtifactsDir is the host directory of the artifact store; empty
	// disables artifact:// and collecting to the store.
	ArtifactsDir string
	// Network says sandboxes have network access (the exec tool is then
	// open-world).
	Network bool
	// Toolsets selects toolsets by name; empty means all.
	Toolsets []string
	// ReadOnly registers only tools that change nothing.
	ReadOnly bool
	// ProgressInterval is how often a running command reports progress.
	// Default one second.
	ProgressInterval time.Duration
	// SignalGrace is how long process_signal waits after TERM before KILL.
	// Default five seconds.
	SignalGrace time.Duration
	// InputWait bounds how long process_input waits for a process that does
	// not read its input. Default 30 seconds.
	InputWait time.Duration
}

// DefaultConfig returns the defaults of the serve command's flags.
func DefaultConfig() Config {
	return Config{
		DefaultTimeout:   60 * time.Second,
		MaxTimeout:       10 * time.Minute,
		OutputLimit:      32 << 10,
		MaxPutBytes:      64 << 20,
		MaxReadBytes:     1 << 20,
		ProgressInterval: time.Second,
		SignalGrace:      5 * time.Second,
		InputWait:        30 * time.Second,
	}
}

// Deps is what the tools need: the sandbox manager, the limits, a logger.
type Deps struct {
	Manager *manage.Manager
	Config  Config
	Logger  *slog.Logger

	runs  runCounter
	procs processRegistry
	shell shellCache
}

// NewDeps returns Deps with defaults filled in for zero Config fields.
func NewDeps(m *manage.Manager, cfg Config, log *slog.Logger) *Deps {
	def := DefaultConfig()
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = def.DefaultTimeout
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = def.MaxTimeout
	}
	if cfg.DefaultTimeout > cfg.MaxTimeout {
		cfg.DefaultTimeout = cfg.MaxTimeout
	}
	if cfg.OutputLimit <= 0 {
		cfg.OutputLimit = def.OutputLimit
	}
	if cfg.MaxPutBytes <= 0 {
		cfg.MaxPutBytes = def.MaxPutBytes
	}
	if cfg.MaxReadBytes <= 0 {
		cfg.MaxReadBytes = def.MaxReadBytes
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = def.ProgressInterval
	}
	if cfg.SignalGrace <= 0 {
		cfg.SignalGrace = def.SignalGrace
	}
	if cfg.InputWait <= 0 {
		cfg.InputWait = def.InputWait
	}
	if log == nil {
		log = slog.Default()
	}
	return &Deps{Manager: m, Config: cfg, Logger: log}
}

// EndSession forgets what the tools keep in memory for workspace key: its
// background processes and its run counter. The server calls it when it
// applies the end-of-session policy (Manager.EndSession) to key. A named
// workspace used again later re-finds its processes in the sandbox, as
// after a server restart.
func (d *Deps) EndSession(key string) {
	d.procs.drop(key)
	d.runs.drop(key)
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
// each call (stdio: --workspace; HTTP: principal plus session or the
// Sandbox-Workspace header).
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

// runCounter numbers runs per workspace key.
type runCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

func (r *runCounter) next(key string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int64{}
	}
	r.n[key]++
	return r.n[key]
}

// drop forgets key's count (its session ended).
func (r *runCounter) drop(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.n, key)
}

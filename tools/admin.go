package tools

import (
	"context"
	"slices"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// ----------------------------------------------------------- workspace_info

type workspaceInfoInput struct{}

type workspaceInfoOutput struct {
	Meta
	Provider    string           `json:"provider" jsonschema_description:"Where sandboxes come from: local, docker or e2b."`
	SandboxID   string           `json:"sandbox_id" jsonschema_description:"The provider's id of the current sandbox."`
	Generation  int64            `json:"generation" jsonschema_description:"How many sandboxes this workspace has had; it grows by one at each recreation or reset."`
	State       string           `json:"state" jsonschema_description:"The sandbox's lifecycle state (running, paused, stopped)."`
	Isolation   string           `json:"isolation" jsonschema_description:"How the sandbox is isolated: bwrap, container, microvm, or none."`
	Workdir     string           `json:"workdir" jsonschema_description:"The workspace root inside the sandbox; tool paths are relative to it."`
	CreatedAt   string           `json:"created_at" jsonschema_description:"When the sandbox was created (RFC 3339, UTC)."`
	AgeSec      int64            `json:"age_sec" jsonschema_description:"Seconds since the sandbox was created."`
	EnvdVersion string           `json:"envd_version,omitempty" jsonschema_description:"Version of the daemon inside the sandbox."`
	Warnings    []string         `json:"warnings,omitempty" jsonschema_description:"Things to keep in mind about this sandbox (for example that nothing isolates it from the host)."`
	Limits      workspaceLimit   `json:"limits" jsonschema_description:"The server's ceilings."`
	Toolsets    []string         `json:"toolsets" jsonschema_description:"The toolsets this server exposes."`
	ReadOnly    bool             `json:"read_only" jsonschema_description:"True when the server exposes only tools that change nothing."`
	StageRoots  []string         `json:"stage_roots" jsonschema_description:"Names of the host directories stage_inputs may read (host://NAME/path); empty when none is allowed."`
	Artifacts   bool             `json:"artifacts" jsonschema_description:"True when the artifact store is configured (collect_outputs, artifact:// inputs)."`
	Network     workspaceNetwork `json:"network" jsonschema_description:"The sandbox's network access; only the operator can change it."`
}

type workspaceLimit struct {
	DefaultTimeoutSec int64 `json:"default_timeout_sec" jsonschema_description:"Timeout of a command that gives no timeout_sec."`
	MaxTimeoutSec     int64 `json:"max_timeout_sec" jsonschema_description:"Ceiling of timeout_sec; larger values are clamped."`
	OutputLimitBytes  int   `json:"output_limit_bytes" jsonschema_description:"Inline output per stream of a command (head and tail); the rest is in the log files."`
	MaxPutBytes       int64 `json:"max_put_bytes" jsonschema_description:"Decoded bytes one put_files call may write."`
	MaxReadBytes      int64 `json:"max_read_bytes" jsonschema_description:"Bytes one read_files call may return, all files together."`
}

// WorkspaceInfo is the workspace_info tool: what the workspace's sandbox is
// and the server's limits. It acquires the sandbox (creating it on first
// use) and checks that its daemon answers.
func WorkspaceInfo(d *Deps) Tool {
	return define(d, spec[workspaceInfoInput, workspaceInfoOutput]{
		name:  "workspace_info",
		title: "Workspace info",
		description: "Describe this workspace's sandbox: provider, id, generation (grows when the sandbox is recreated or reset), state, isolation, workspace root, age and daemon version, " +
			"plus the server's limits (timeouts, output and file caps), the enabled toolsets, the host roots stage_inputs may read and whether the artifact store exists. " +
			"Use it to learn the limits before large work, or to check the sandbox after a notice.",
		toolset:     ToolsetAdmin,
		annotations: Annotations{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false},
		run:         runWorkspaceInfo,
	})
}

func runWorkspaceInfo(ctx context.Context, c *Call, _ *workspaceInfoInput) (*workspaceInfoOutput, error) {
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	// One round trip proves the daemon answers, so a lost sandbox is
	// detected here (Version alone may answer from its cache).
	if err := lease.Client.Health(ctx); err != nil {
		return nil, c.Check(err)
	}
	version, err := lease.Client.Version(ctx)
	if err != nil {
		return nil, c.Check(err)
	}
	sb := lease.Sandbox
	if sb.EnvdVersion != "" {
		version = sb.EnvdVersion
	}
	cfg := c.d.Config
	out := &workspaceInfoOutput{
		Provider:    sb.Provider,
		SandboxID:   sb.ID,
		Generation:  lease.Generation,
		State:       string(sb.State),
		Isolation:   sb.Isolation,
		Workdir:     sb.Workdir,
		EnvdVersion: version,
		Warnings:    slices.Clone(sb.Warnings),
		Limits: workspaceLimit{
			DefaultTimeoutSec: int64(cfg.DefaultTimeout / time.Second),
			MaxTimeoutSec:     int64(cfg.MaxTimeout / time.Second),
			OutputLimitBytes:  cfg.OutputLimit,
			MaxPutBytes:       cfg.MaxPutBytes,
			MaxReadBytes:      cfg.MaxReadBytes,
		},
		Toolsets:   enabledToolsets(cfg),
		ReadOnly:   cfg.ReadOnly,
		StageRoots: []string{},
		Artifacts:  cfg.ArtifactsDir != "",
		Network:    newWorkspaceNetwork(sandboxNetwork(c, sb)),
	}
	if out.Provider == "" {
		out.Provider = c.d.Manager.Provider().Name()
	}
	if !sb.CreatedAt.IsZero() {
		out.CreatedAt = sb.CreatedAt.UTC().Format(time.RFC3339)
		out.AgeSec = int64(time.Since(sb.CreatedAt) / time.Second)
	}
	if (sb.Isolation == "" || sb.Isolation == "none") && len(out.Warnings) == 0 {
		out.Warnings = append(out.Warnings, "This sandbox is not isolated from the host: commands run with the server's own permissions.")
	}
	if w := networkMismatch(sb, cfg.Network); w != "" {
		out.Warnings = append(out.Warnings, w)
	}
	for name := range cfg.StageRoots {
		out.StageRoots = append(out.StageRoots, name)
	}
	slices.Sort(out.StageRoots)
	return out, nil
}

// enabledToolsets lists the toolsets cfg selects, in display order.
func enabledToolsets(cfg Config) []string {
	// An unknown name stopped the server at startup (Selected).
	want, _ := wantedToolsets(cfg.Toolsets)
	out := []string{}
	for _, ts := range Toolsets {
		if want == nil || want[ts.Name] {
			out = append(out, ts.Name)
		}
	}
	return out
}

// ---------------------------------------------------------- workspace_reset

type workspaceResetInput struct {
	Confirm bool `json:"confirm" jsonschema:"required" jsonschema_description:"Must be true (false is refused): resetting destroys the sandbox with all its files, installed packages and processes."`
}

type workspaceResetOutput struct {
	Meta
	Generation         int64  `json:"generation" jsonschema_description:"The new sandbox's generation."`
	PreviousGeneration int64  `json:"previous_generation" jsonschema_description:"The generation that was destroyed."`
	SandboxID          string `json:"sandbox_id" jsonschema_description:"The provider's id of the new sandbox."`
}

// WorkspaceReset is the workspace_reset tool: it destroys the workspace's
// sandbox and starts a fresh one. Processes and run handles of the old
// generation become stale.
func WorkspaceReset(d *Deps) Tool {
	return define(d, spec[workspaceResetInput, workspaceResetOutput]{
		name:  "workspace_reset",
		title: "Reset workspace",
		description: "Destroy this workspace's sandbox and start a fresh, empty one: every file, installed package and running process is lost, and the generation grows by one. " +
			"Artifacts stored with collect_outputs survive and can be staged back with stage_inputs. Requires confirm: true. " +
			"Use it when the sandbox is broken beyond repair or a clean start is wanted.",
		toolset:     ToolsetAdmin,
		annotations: Annotations{ReadOnly: false, Destructive: true, Idempotent: false, OpenWorld: false},
		run:         runWorkspaceReset,
	})
}

func runWorkspaceReset(ctx context.Context, c *Call, in *workspaceResetInput) (*workspaceResetOutput, error) {
	// The schema says only that confirm is a boolean (no const: Gemini's
	// converters turn one into an enum its API rejects), so false stops here.
	if !in.Confirm {
		return nil, inputErr("confirm", "must be true to reset: the reset destroys every file, installed package and process in the sandbox")
	}
	// Reset reads the store for a workspace this process has not used yet,
	// so a sandbox recorded by an earlier run is destroyed too.
	gen, err := c.d.Manager.Reset(ctx, c.ws.Key, c.ws.Named)
	if err != nil {
		return nil, err
	}
	// Reset publishes the generation after the one it destroyed.
	prev := gen - 1
	out := &workspaceResetOutput{Generation: gen, PreviousGeneration: prev}
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	out.SandboxID = lease.Sandbox.ID
	if lease.Generation != gen {
		// Another call replaced it again meanwhile; report what serves now.
		out.Generation = lease.Generation
	}
	c.Notice("%s", eventNotice(manage.Event{Kind: manage.EventReset, PrevGeneration: prev, Generation: out.Generation}))
	return out, nil
}

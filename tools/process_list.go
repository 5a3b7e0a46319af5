package tools

import (
	"context"
	"slices"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// maxOtherProcesses bounds process_list's others.
const maxOtherProcesses = 100

// processListInput is process_list's (empty) arguments.
type processListInput struct{}

// processInfo describes one process in process_list.
type processInfo struct {
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle."`
	Pid     uint32 `json:"pid" jsonschema_description:"Process id in the sandbox."`
	RunID   string `json:"run_id" jsonschema_description:"The run id."`
	Command string `json:"command,omitempty" jsonschema_description:"The command as started (absent when the server re-found the process after a restart and it had ended)."`
	processStatus
	StartedAt string `json:"started_at,omitempty" jsonschema_description:"When it was started (RFC 3339), when known."`
	EndedAt   string `json:"ended_at,omitempty" jsonschema_description:"When the server saw it end (RFC 3339)."`
	Log       string `json:"log" jsonschema_description:"Workspace-relative path of its output log."`
}

// otherProcess is a live process in the sandbox that is not a tracked
// background process.
type otherProcess struct {
	Pid     uint32 `json:"pid" jsonschema_description:"Process id in the sandbox."`
	Command string `json:"command" jsonschema_description:"Its command line."`
	RunID   string `json:"run_id,omitempty" jsonschema_description:"Its run id, when workspace_exec started it (a foreground command in progress, or a background one of another sandbox generation)."`
}

// processListOutput is process_list's result.
type processListOutput struct {
	Meta
	Processes       []processInfo  `json:"processes" jsonschema_description:"Background processes started in this workspace's current sandbox, oldest first (the most recent ended ones are kept)."`
	Others          []otherProcess `json:"others,omitempty" jsonschema_description:"Other processes running in the sandbox that process_output cannot follow: foreground workspace_exec commands in progress, and anything not started through these tools."`
	OthersTruncated bool           `json:"others_truncated,omitempty" jsonschema_description:"True when others was cut at 100 entries."`
}

// ProcessList is the process_list tool: the background processes of the
// workspace, with their status.
func ProcessList(d *Deps) Tool {
	return define(d, spec[processListInput, processListOutput]{
		name:  "process_list",
		title: "List background processes",
		description: "List the processes " + startedBy(d) + " in this workspace's current sandbox: handle, pid, command, status, exit_code, start time and log path. " +
			"Also lists other processes running in the sandbox (foreground commands in progress, anything else) under others. Use it to find a handle you lost or to check what is still running.",
		toolset:     ToolsetProcess,
		annotations: Annotations{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false},
		run:         runProcessList,
	})
}

func runProcessList(ctx context.Context, c *Call, _ *processListInput) (*processListOutput, error) {
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	live, err := lease.Client.List(ctx)
	if err != nil {
		return nil, c.Check(err)
	}
	out := &processListOutput{Processes: []processInfo{}}
	known := map[uint32]bool{}
	for _, e := range c.d.procs.list(c.ws.Key, lease.Generation) {
		if e.followed() {
			known[e.pid] = true
		}
	}
	slices.SortFunc(live, func(a, b envdclient.ProcessInfo) int { return int(a.Pid) - int(b.Pid) })
	for _, p := range live {
		if known[p.Pid] {
			continue
		}
		kind, runID, tagged := parseProcessTag(p.Tag)
		if tagged && kind == tagBg {
			// Started here but not followed (a server restart): follow it again.
			adopted, err := followAgain(ctx, c, lease, p.Pid, runID, live)
			if err != nil {
				return nil, err
			}
			if adopted {
				continue
			}
		}
		if len(out.Others) >= maxOtherProcesses {
			out.OthersTruncated = true
			continue
		}
		out.Others = append(out.Others, otherProcessOf(p))
	}
	for _, e := range c.d.procs.list(c.ws.Key, lease.Generation) {
		out.Processes = append(out.Processes, processInfoOf(e))
	}
	return out, nil
}

// followAgain adopts background process pid of run runID when it belongs
// to the lease's generation, unless it is followed again meanwhile. It
// reports whether the process is followed now; only a lost sandbox is an
// error (a process that cannot be adopted is listed with the others).
func followAgain(ctx context.Context, c *Call, lease *manage.Lease, pid uint32, runID string, live []envdclient.ProcessInfo) (bool, error) {
	run, _ := parseHandle(runID)
	if run.gen != lease.Generation {
		return false, nil
	}
	ref := handleRef{gen: run.gen, pid: pid}
	e := c.d.procs.find(c.ws.Key, ref)
	if e != nil && e.followed() {
		return true, nil
	}
	_, err := adoptProcess(ctx, c, lease, ref, e, live)
	if err == nil {
		return true, nil
	}
	if isLost(err) {
		return false, err
	}
	return false, nil
}

// otherProcessOf describes a live process that is not a tracked background
// process: a run of the tools shows its run id and the command as given.
func otherProcessOf(p envdclient.ProcessInfo) otherProcess {
	o := otherProcess{Pid: p.Pid, Command: shellQuoteArgs(append([]string{p.Cmd}, p.Args...))}
	kind, runID, tagged := parseProcessTag(p.Tag)
	switch {
	case tagged && kind == tagFg:
		o.RunID = runID
		if len(p.Args) == 2 && (p.Args[0] == "-lc" || p.Args[0] == "-c") {
			o.Command = p.Args[1]
		}
	case tagged && kind == tagBg:
		o.RunID = runID
		if cmd := describeBackgroundArgs(p.Args); cmd != "" {
			o.Command = cmd
		}
	}
	return o
}

// processInfoOf describes a tracked background process.
func processInfoOf(e *procEntry) processInfo {
	end, _ := e.state()
	info := processInfo{
		Process:       e.handle,
		Pid:           e.pid,
		RunID:         e.runID,
		Command:       e.command,
		processStatus: statusOf(end),
		Log:           e.logRel,
	}
	if !e.startedAt.IsZero() {
		info.StartedAt = e.startedAt.UTC().Format(time.RFC3339)
	}
	if !end.endedAt.IsZero() {
		info.EndedAt = end.endedAt.UTC().Format(time.RFC3339)
	}
	return info
}

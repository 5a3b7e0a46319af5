package tools

import (
	"context"
	"time"

	"github.com/invopop/jsonschema"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// Limits of process_output.
const (
	// defaultOutputBytes and maxOutputBytes bound one process_output page.
	defaultOutputBytes = 32 << 10
	maxOutputBytes     = 1 << 20
	// maxWaitSec bounds process_output's wait_sec.
	maxWaitSec = 60
	// watchFallbackPoll is how often process_output looks at the log when
	// the sandbox cannot watch directories (a fallback only).
	watchFallbackPoll = 500 * time.Millisecond
)

// processOutputInput is process_output's arguments.
type processOutputInput struct {
	Process  string `json:"process" jsonschema:"required" jsonschema_description:"The process handle workspace_exec returned for a background command (like g1-p42); its run_id (like g1-r3) works too."`
	Offset   int64  `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Byte offset in the process's combined output log to read from. Default 0; pass the previous result's next_offset to continue."`
	WaitSec  int    `json:"wait_sec,omitempty" jsonschema:"minimum=0" jsonschema_description:"Seconds to wait (0 to 60) for output past offset or for the process to end, when there is none yet. Default 0: answer at once."`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"minimum=1" jsonschema_description:"Most bytes of output to return (default 32768, at most 1048576)."`
}

// JSONSchemaExtend publishes the limits runProcessOutput relies on.
func (processOutputInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "wait_sec").Maximum = schemaInt(maxWaitSec)
	maxBytes := schemaProp(s, "max_bytes")
	maxBytes.Maximum, maxBytes.Default = schemaInt(maxOutputBytes), defaultOutputBytes
}

// processOutputOutput is process_output's result.
type processOutputOutput struct {
	Meta
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle."`
	RunID   string `json:"run_id" jsonschema_description:"The run id of the process; its log is .sandbox-mcp/runs/<run_id>/output.log."`
	processStatus
	Output      string `json:"output" jsonschema_description:"Output (stdout and stderr interleaved) from offset to next_offset, as text."`
	Offset      int64  `json:"offset" jsonschema_description:"Where this page starts in the log."`
	NextOffset  int64  `json:"next_offset" jsonschema_description:"Where the next page starts: pass it as offset to continue."`
	TotalBytes  int64  `json:"total_bytes" jsonschema_description:"Size of the log now."`
	Truncated   bool   `json:"truncated" jsonschema_description:"True when more output is already available after next_offset (read again without waiting)."`
	EOF         bool   `json:"eof" jsonschema_description:"True when the process has ended and everything was read: nothing more will come."`
	InvalidUTF8 bool   `json:"invalid_utf8,omitempty" jsonschema_description:"True when the page had bytes that are not UTF-8; they are shown as U+FFFD (the log keeps the exact bytes)."`
	Log         string `json:"log" jsonschema_description:"Workspace-relative path of the log, readable with read_files."`
}

// ProcessOutput is the process_output tool: it reads a background process's
// output log from an offset, optionally waiting for more.
func ProcessOutput(d *Deps) Tool {
	return define(d, spec[processOutputInput, processOutputOutput]{
		name:  "process_output",
		title: "Read a background process's output",
		description: "Read the output (stdout and stderr interleaved) of a process started with workspace_exec background: true, from a byte offset; pass next_offset back to continue. " +
			"With wait_sec it waits up to that long for new output or for the process to end, so you can follow a process without busy polling. " +
			"It also reports the status (running, exited, killed) and exit_code, and works after the process ended: its log stays in the workspace.",
		toolset:     ToolsetProcess,
		annotations: Annotations{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false},
		run:         runProcessOutput,
	})
}

func runProcessOutput(ctx context.Context, c *Call, in *processOutputInput) (*processOutputOutput, error) {
	// The schema checks the ranges of offset, wait_sec and max_bytes.
	limit := int64(in.MaxBytes)
	if limit == 0 {
		limit = defaultOutputBytes
	}
	e, lease, err := findProcess(ctx, c, "process", in.Process)
	if err != nil {
		return nil, err
	}
	cli := lease.Client
	page := func() (logPage, error) {
		end, ended := e.state()
		p, err := readLog(ctx, cli, e.logAbs, in.Offset, limit)
		p.end, p.ended = end, ended
		return p, err
	}
	p, err := page()
	if err != nil {
		return nil, c.Check(err)
	}
	if len(p.data) == 0 && !p.ended && in.WaitSec > 0 {
		if p, err = waitForOutput(ctx, c, cli, e, time.Duration(in.WaitSec)*time.Second, page); err != nil {
			return nil, err
		}
	}
	// Hand out whole characters: a character cut by the page end (or still
	// being written) is left for the next read.
	n := len(p.data)
	final := p.ended && in.Offset+int64(n) >= p.size
	if !final {
		n = cutAtRune(p.data)
	}
	text, bad := validText(p.data[:n])
	next := in.Offset + int64(n)
	out := &processOutputOutput{
		Process:       e.handle,
		RunID:         e.runID,
		processStatus: statusOf(p.end),
		Output:        text,
		Offset:        in.Offset,
		NextOffset:    next,
		TotalBytes:    p.size,
		Truncated:     next < p.size,
		EOF:           p.ended && next >= p.size,
		InvalidUTF8:   bad,
		Log:           e.logRel,
	}
	if bad {
		c.Notice("%s", invalidUTF8Notice("The output", e.logRel))
	}
	if in.Offset > p.size {
		c.Notice("offset %d is past the end of the log (%d bytes); nothing was read.", in.Offset, p.size)
	}
	networkNotice(c, lease.Sandbox, &out.Output, nil)
	return out, nil
}

// logPage is one read of a process log.
type logPage struct {
	data  []byte
	size  int64 // the log's size at the time of the read
	end   procEnd
	ended bool // the process had ended before the read began
}

// readLog reads up to limit bytes of the log at abs from offset. A log that
// does not exist yet reads as empty.
func readLog(ctx context.Context, cli *envdclient.Client, abs string, offset, limit int64) (logPage, error) {
	data, size, err := readRange(ctx, cli, abs, offset, limit)
	if envdclient.IsNotFound(err) {
		return logPage{}, nil
	}
	if err != nil {
		return logPage{}, err
	}
	return logPage{data: data, size: size}, nil
}

// waitForOutput blocks until the log grows past the offset, the process
// ends, wait passes, or ctx ends. It watches the run directory for writes
// (no polling) and listens for the registry's end notification.
func waitForOutput(ctx context.Context, c *Call, cli *envdclient.Client, e *procEntry, wait time.Duration, page func() (logPage, error)) (logPage, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var events <-chan envdclient.FileEvent
	var poll <-chan time.Time
	var ticker *time.Ticker
	startPolling := func() {
		ticker = time.NewTicker(watchFallbackPoll)
		poll = ticker.C
	}
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	w, err := cli.Watch(ctx, e.runDirAbs, envdclient.WatchOptions{})
	switch {
	case err == nil:
		defer w.Close()
		events = w.Events()
	case ctx.Err() != nil:
		return logPage{}, ctx.Err()
	case envdclient.IsPossibleLoss(err):
		return logPage{}, c.Check(err)
	default:
		// The sandbox cannot watch this directory: look now and then instead.
		startPolling()
	}
	for {
		// Read after the watch is in place, so no write falls in between.
		p, err := page()
		if err != nil {
			return logPage{}, c.Check(err)
		}
		if len(p.data) > 0 || p.ended {
			return p, nil
		}
		select {
		case _, ok := <-events:
			if !ok {
				events = nil
				startPolling()
			}
		case <-poll:
		case <-e.done:
		case <-timer.C:
			return p, nil
		case <-ctx.Done():
			return logPage{}, ctx.Err()
		}
	}
}

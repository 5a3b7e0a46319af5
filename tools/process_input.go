package tools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/invopop/jsonschema"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// processInputInput is process_input's arguments.
type processInputInput struct {
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle (like g1-p42)."`
	Data    string `json:"data,omitempty" jsonschema_description:"Text to write to the process's standard input, exactly as given (add a trailing newline for line-oriented programs)."`
	Close   bool   `json:"close,omitempty" jsonschema_description:"Close standard input after writing data, so the process reads end-of-file. It cannot be reopened."`
	WaitSec int    `json:"wait_sec,omitempty" jsonschema:"minimum=0" jsonschema_description:"Seconds to wait at most (0 to 60) for the output the input produced, which is then returned: the wait ends when new output arrived and paused (a short settle time), or the process ended. Default 0: return at once (read the answer with process_output)."`
}

// JSONSchemaExtend publishes the limits runProcessInput relies on.
func (processInputInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "wait_sec").Maximum = schemaInt(maxWaitSec)
}

// processInputOutput is process_input's result.
type processInputOutput struct {
	Meta
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle."`
	Written int    `json:"written" jsonschema_description:"Bytes written to standard input."`
	Closed  bool   `json:"closed" jsonschema_description:"True when standard input is now closed."`
	// The output after the input, with wait_sec.
	Status      string  `json:"status,omitempty" jsonschema:"enum=running,enum=exited,enum=killed,enum=unknown" jsonschema_description:"With wait_sec: the process's status after the wait."`
	ExitCode    *int    `json:"exit_code,omitempty" jsonschema_description:"With wait_sec: the exit status, when the process ended."`
	Output      *string `json:"output,omitempty" jsonschema_description:"With wait_sec: the output (stdout and stderr interleaved) written after the input, from offset to next_offset."`
	Offset      *int64  `json:"offset,omitempty" jsonschema_description:"With wait_sec: where output starts in the process's log (its size when the input was written)."`
	NextOffset  *int64  `json:"next_offset,omitempty" jsonschema_description:"With wait_sec: where the next read starts; pass it to process_output as offset."`
	Truncated   bool    `json:"truncated,omitempty" jsonschema_description:"With wait_sec: true when more output is already in the log after next_offset."`
	InvalidUTF8 bool    `json:"invalid_utf8,omitempty" jsonschema_description:"True when output had bytes that are not UTF-8; they are shown as U+FFFD."`
}

// ProcessInput is the process_input tool: it writes to a background
// process's stdin or closes it.
func ProcessInput(d *Deps) Tool {
	return define(d, spec[processInputInput, processInputOutput]{
		name:  "process_input",
		title: "Write to a background process's input",
		description: "Write text to the standard input of a process " + startedBy(d) + ", and/or close its input (close: true) so it reads end-of-file. " +
			"With wait_sec the call also waits for the output the input produced and returns it (a REPL's answer and its next prompt, for example): the wait ends once that output pauses or the process ends. " +
			"Without it, read the answer with process_output. A process that has ended, or whose input was closed, takes no more input.",
		toolset: ToolsetProcess,
		annotations: Annotations{
			ReadOnly: false,
			// Not destructive in itself: it adds input to a process the agent
			// started and deletes or overwrites nothing; what the program does
			// with the input was decided when it was started.
			Destructive: false,
			Idempotent:  false, // the same text twice is read twice
			OpenWorld:   false,
		},
		run: runProcessInput,
	})
}

func runProcessInput(ctx context.Context, c *Call, in *processInputInput) (*processInputOutput, error) {
	if in.Data == "" && !in.Close {
		return nil, inputErr("data", "nothing to do: give data to write, close: true, or both")
	}
	e, lease, err := findProcess(ctx, c, "process", in.Process)
	if err != nil {
		return nil, err
	}
	if end, ended := e.state(); ended {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"process %s has already ended (%s), so it takes no more input", e.handle, describeEnd(end)))
	}
	e.mu.Lock()
	closed := e.stdinClosed
	e.mu.Unlock()
	if closed {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"the standard input of process %s was already closed, so it takes no more input", e.handle))
	}
	gone := func(err error) error {
		if envdclient.IsStdinGone(err) {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"process %s no longer takes input (it ended or closed its input): %s", e.handle, rootCause(err)))
		}
		return c.Check(err)
	}
	out := &processInputOutput{Process: e.handle}
	// Where the answer to this input will start: the log's end before it.
	var from int64
	if in.WaitSec > 0 {
		st, err := lease.Client.Stat(ctx, e.logAbs)
		switch {
		case err == nil:
			from = st.Size
		case !envdclient.IsNotFound(err):
			return nil, c.Check(err)
		}
	}
	if in.Data != "" {
		// A process that does not read its input would hold the call
		// forever once the pipe is full: bound the wait.
		inputWait := c.d.Config.InputWait
		wctx, cancel := context.WithTimeout(ctx, inputWait)
		n, err := sendInput(wctx, lease.Client, e.pid, []byte(in.Data))
		cancel()
		if err != nil && ctx.Err() == nil && (connect.CodeOf(err) == connect.CodeDeadlineExceeded || errors.Is(err, context.DeadlineExceeded)) {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"process %s is not reading its standard input: %d of %d bytes went in within %s and the rest was not sent; check it with process_output",
				e.handle, n, len(in.Data), inputWait))
		}
		if err != nil {
			return nil, gone(err)
		}
		out.Written = n
	}
	if in.Close {
		// A process that ended (perhaps on the data just written) or
		// already closed its input has no input to close: that is success.
		if err := lease.Client.CloseStdin(ctx, envdclient.ByPid(e.pid)); err != nil && !envdclient.IsStdinGone(err) {
			if out.Written > 0 {
				c.Notice("The data was written, but closing standard input failed.")
			}
			return nil, c.Check(err)
		}
		e.mu.Lock()
		e.stdinClosed = true
		e.mu.Unlock()
		out.Closed = true
	}
	if in.WaitSec > 0 {
		if err := answerOf(ctx, c, lease.Client, e, from, time.Duration(in.WaitSec)*time.Second, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// answerOf waits for the output process e writes past offset from and puts
// it into out.
func answerOf(ctx context.Context, c *Call, cli *envdclient.Client, e *procEntry, from int64, wait time.Duration, out *processInputOutput) error {
	page := func() (logPage, error) {
		end, ended := e.state()
		p, err := readLog(ctx, cli, e.logAbs, from, defaultOutputBytes)
		p.end, p.ended = end, ended
		return p, err
	}
	p, err := waitForOutput(ctx, c, cli, e, wait, c.d.Config.OutputSettle, defaultOutputBytes, page)
	if err != nil {
		return err
	}
	n := len(p.data)
	if !p.ended || from+int64(n) < p.size {
		n = cutAtRune(p.data)
	}
	text, bad := validText(p.data[:n])
	next := from + int64(n)
	st := statusOf(p.end)
	out.Status, out.ExitCode = st.Status, st.ExitCode
	out.Output, out.Offset, out.NextOffset = &text, &from, &next
	out.Truncated, out.InvalidUTF8 = next < p.size, bad
	if bad {
		c.Notice("%s", invalidUTF8Notice("The output", e.logRel))
	}
	return nil
}

// describeEnd says how a process ended, for error messages.
func describeEnd(end procEnd) string {
	switch {
	case end.status == statusUnknown:
		return "how is unknown"
	case end.signal != "" && end.exitCode != nil:
		return fmt.Sprintf("killed by signal %s, exit code %d", end.signal, *end.exitCode)
	case end.exitCode != nil:
		return fmt.Sprintf("exit code %d", *end.exitCode)
	}
	return end.status
}

// stdinFrame is the most bytes of one stdin frame, as envd reads them.
const stdinFrame = 32 << 10

// sendInput writes data to pid's stdin in frames of at most stdinFrame. It
// says how many bytes went in (whole frames) before an error.
func sendInput(ctx context.Context, cli *envdclient.Client, pid uint32, data []byte) (int, error) {
	written := 0
	for len(data) > 0 {
		n := min(len(data), stdinFrame)
		if err := cli.SendInput(ctx, envdclient.ByPid(pid), data[:n]); err != nil {
			return written, err
		}
		written += n
		data = data[n:]
	}
	return written, nil
}

package tools

import (
	"context"
	"fmt"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// killWait bounds how long process_signal waits for a KILLed process to be
// reported gone.
const killWait = 10 * time.Second

// processSignalInput is process_signal's arguments.
type processSignalInput struct {
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle (like g1-p42)."`
	Signal  string `json:"signal,omitempty" jsonschema:"enum=TERM,enum=KILL,default=TERM" jsonschema_description:"TERM (default) asks the process to stop and sends KILL if it has not ended within the server's grace period; KILL ends it at once. The signal goes to the process and its children."`
}

// processSignalOutput is process_signal's result.
type processSignalOutput struct {
	Meta
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle."`
	processStatus
	Sent            []string `json:"sent,omitempty" jsonschema_description:"The signals sent, in order (none when the process had already ended)."`
	EscalatedToKill bool     `json:"escalated_to_kill" jsonschema_description:"True when TERM did not end the process within the grace period and KILL was sent."`
	AlreadyEnded    bool     `json:"already_ended" jsonschema_description:"True when the process had ended before the signal reached it; nothing was sent."`
}

// ProcessSignal is the process_signal tool: it stops a background process,
// TERM first and KILL after a grace period.
func ProcessSignal(d *Deps) Tool {
	grace := d.Config.SignalGrace
	return define(d, spec[processSignalInput, processSignalOutput]{
		name:  "process_signal",
		title: "Stop a background process",
		description: fmt.Sprintf("Stop a process "+startedBy(d)+", with its children. "+
			"TERM (default) asks it to stop and sends KILL if it is still running after %s; KILL ends it at once. "+
			"Returns its status and exit_code afterwards. Signalling a process that already ended is not an error: its status is reported.", grace),
		toolset:     ToolsetProcess,
		annotations: Annotations{ReadOnly: false, Destructive: true, Idempotent: true, OpenWorld: false},
		run:         runProcessSignal,
	})
}

func runProcessSignal(ctx context.Context, c *Call, in *processSignalInput) (*processSignalOutput, error) {
	sig, name := envdclient.SIGTERM, "TERM" // the schema allows only TERM and KILL
	if in.Signal == "KILL" {
		sig, name = envdclient.SIGKILL, "KILL"
	}
	e, lease, err := findProcess(ctx, c, "process", in.Process)
	if err != nil {
		return nil, err
	}
	out := &processSignalOutput{Process: e.handle}
	if end, ended := e.state(); ended {
		out.processStatus, out.AlreadyEnded = statusOf(end), true
		return out, nil
	}
	// send reports whether the signal reached the process: envd not knowing
	// the pid means it ended before the signal did.
	send := func(s envdclient.Signal, name string) (bool, error) {
		err := lease.Client.SendSignal(ctx, envdclient.ByPid(e.pid), s)
		if envdclient.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, c.Check(err)
		}
		out.Sent = append(out.Sent, name)
		return true, nil
	}
	sent, err := send(sig, name)
	if err != nil {
		return nil, err
	}
	out.AlreadyEnded = !sent
	// Wait for the end (when nothing was sent, for its report).
	ended, err := waitEnd(ctx, e, c.d.Config.SignalGrace)
	if err != nil {
		return nil, err
	}
	switch {
	case ended:
	case !sent:
		c.Notice("Process %s had already ended when the signal was sent, but how it ended has not been reported yet; check again with process_output.", e.handle)
	default:
		if sig == envdclient.SIGTERM {
			if out.EscalatedToKill, err = send(envdclient.SIGKILL, "KILL"); err != nil {
				return nil, err
			}
		}
		if ended, err = waitEnd(ctx, e, killWait); err != nil {
			return nil, err
		}
		if !ended {
			c.Notice("Process %s was sent %s but was still reported running %s later; check again with process_output.", e.handle, out.Sent[len(out.Sent)-1], killWait)
		}
	}
	end, _ := e.state()
	out.processStatus = statusOf(end)
	return out, nil
}

// waitEnd waits up to d for the registry to see e end, and reports whether
// it did.
func waitEnd(ctx context.Context, e *procEntry, d time.Duration) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.done:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

package envdclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/proto/process"
)

// versionCloseStdin is the first envd with CloseStdin.
const versionCloseStdin = "0.5.2"

// stdinChunk is the largest stdin frame sent; envd's own chunk size.
const stdinChunk = 32 << 10

// deadlineGrace is how long past Command.Timeout the client waits for envd to
// report the kill before it kills the process itself. envd kills at the
// deadline; this only guards against a daemon that does not.
const deadlineGrace = 5 * time.Second

// Command describes one process to start.
type Command struct {
	// Cmd is the executable (a path, or a name looked up in PATH).
	Cmd string
	// Args are the arguments after Cmd.
	Args []string
	// Env adds to (and overrides) envd's base environment.
	Env map[string]string
	// Cwd is the working directory; empty means envd's default (the root).
	Cwd string
	// Tag names the process for selection. Run and Start pick a random tag
	// when empty, so an abandoned call can kill the process before its pid is
	// known.
	Tag string
	// Stdin, when set, is written to the process while its output is read,
	// and the pipe is closed (EOF) when Stdin ends. Nil means no stdin pipe.
	Stdin io.Reader
	// Timeout, when positive, is the remote deadline (Connect-Timeout-Ms):
	// envd kills the process group when it passes.
	Timeout time.Duration
	// PTY, when set, runs the process on a pseudo-terminal of this size;
	// output then arrives as one stream (Stdout).
	PTY *PTYSize
}

// PTYSize is a terminal size.
type PTYSize struct{ Cols, Rows uint32 }

// RunOptions says what Run keeps of the output.
type RunOptions struct {
	// StdoutLimit and StderrLimit bound the bytes kept in memory per stream
	// (head and tail). Zero means DefaultCaptureLimit; negative keeps none.
	StdoutLimit, StderrLimit int
	// Stdout and Stderr, when set, receive the whole stream as it arrives.
	// A writer that fails stops receiving; Result.TeeErr says why.
	Stdout, Stderr io.Writer
	// OnStart is called with the pid once the process started.
	OnStart func(pid uint32)
}

// Result is the outcome of a process that ended.
type Result struct {
	Pid uint32
	Tag string
	// Stdout and Stderr hold what was captured (a PTY's output is in Stdout).
	Stdout, Stderr Output
	// ExitCode is the exit status; a death by signal reports 128+signal, so a
	// killed process is never a silent 0. -1 means envd reported an error
	// without a status.
	ExitCode int
	// Exited is true when the process exited normally (not by a signal).
	Exited bool
	// Signal names the signal that ended the process ("killed"), if any.
	Signal string
	// Status and Error are envd's texts ("exit status 1", "signal: killed").
	Status, Error string
	// TimedOut is true when Command.Timeout ended the process.
	TimedOut bool
	// Duration is the time from sending the request to the end event.
	Duration time.Duration
	// TeeErr is the first error of a Stdout/Stderr writer, if any.
	TeeErr error
}

// Run starts cmd, waits for it to end, and returns its outcome. A process
// that exits non-zero is a Result, not an error. Errors are *connect.Error.
//
// When ctx ends first, or stdin or the stream fails, the process is killed
// (by pid, or by tag before the pid is known), bounded by the kill timeout,
// and Run returns the error. Memory held is bounded by the capture limits
// whatever the output size.
func (c *Client) Run(ctx context.Context, cmd Command, opts RunOptions) (*Result, error) {
	if err := c.checkStdin(ctx, cmd); err != nil {
		return nil, err
	}
	if cmd.Tag == "" {
		cmd.Tag = newTag()
	}
	started := time.Now()
	// The stream outlives ctx just long enough to see a late start event,
	// so an abandoned process can still be killed by pid. It is opened in
	// the receiving goroutine: envd answers the call with the start event,
	// and ctx must be heeded while it waits for that too.
	streamCtx, cancelStream := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStream()

	r := &runner{
		c:       c,
		cmd:     cmd,
		opts:    opts,
		stdout:  newCapture(limitOr(opts.StdoutLimit)),
		stderr:  newCapture(limitOr(opts.StderrLimit)),
		events:  make(chan runEvent, 1),
		started: make(chan struct{}),
		stdinCh: make(chan error, 1),
		done:    make(chan struct{}),
	}
	defer close(r.done)
	defer r.stop()
	go r.receive(streamCtx)

	var deadline <-chan time.Time
	if cmd.Timeout > 0 {
		t := time.NewTimer(cmd.Timeout + deadlineGrace)
		defer t.Stop()
		deadline = t.C
	}
	sawStart := false
	for {
		select {
		case ev := <-r.events:
			switch {
			case ev.start != nil:
				r.pid = ev.start.GetPid()
				if opts.OnStart != nil {
					opts.OnStart(r.pid)
				}
				if cmd.Stdin != nil {
					go func() { r.stdinCh <- r.feedStdin(streamCtx) }()
				}
				if !sawStart {
					sawStart = true
					close(r.started)
				}
			case ev.end != nil:
				r.stop()
				return r.result(ev.end, time.Since(started)), nil
			case ev.err != nil && ev.unopened:
				// The Start call failed before envd answered it.
				return nil, ev.err
			case ev.err != nil:
				// The stream ended without an end event.
				r.kill()
				return nil, ev.err
			}
		case err := <-r.stdinCh:
			if err != nil {
				r.kill()
				return nil, err
			}
		case <-ctx.Done():
			r.abandon()
			return nil, connect.NewError(codeForContext(ctx.Err()), fmt.Errorf("run %s: %w", cmd.Cmd, ctx.Err()))
		case <-deadline:
			// envd did not end the process at its deadline: end it here.
			r.kill()
			r.stop()
			res := &Result{Pid: r.pid, Tag: cmd.Tag, Stdout: r.stdout.output(), Stderr: r.stderr.output(),
				ExitCode: 128 + int(syscall.SIGKILL), Signal: "killed", Status: "signal: killed",
				Error: "killed by the client: envd did not end the process at its deadline", TimedOut: true,
				Duration: time.Since(started), TeeErr: r.teeErr}
			return res, nil
		}
	}
}

// checkStdin refuses finite stdin on an envd that cannot close it, which
// would otherwise leave the process waiting for EOF forever.
func (c *Client) checkStdin(ctx context.Context, cmd Command) error {
	if cmd.Stdin == nil || cmd.PTY != nil {
		return nil
	}
	v, err := c.Version(ctx)
	if err != nil {
		return err
	}
	if !atLeast(v, versionCloseStdin) {
		return connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("envd %s cannot close stdin (needs %s or newer), so a process given finite stdin would never see EOF; upgrade the sandbox's envd or run without stdin", v, versionCloseStdin))
	}
	return nil
}

func limitOr(n int) int {
	switch {
	case n == 0:
		return DefaultCaptureLimit
	case n < 0:
		return 0
	}
	return n
}

// newTag returns a random process tag.
func newTag() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "sbx-" + hex.EncodeToString(b[:])
}

// startStream sends the Start request; withStdin asks for a stdin pipe.
func (c *Client) startStream(ctx context.Context, cmd Command, withStdin bool) (*connect.ServerStreamForClient[process.StartResponse], error) {
	req := connect.NewRequest(startRequest(cmd, withStdin))
	c.streamHeaders(req.Header())
	if cmd.Timeout > 0 {
		req.Header().Set("Connect-Timeout-Ms", strconv.FormatInt(max(cmd.Timeout.Milliseconds(), 1), 10))
	}
	stream, err := c.procs.Start(ctx, req)
	if err != nil {
		return nil, wrapCallError("start "+cmd.Cmd, err)
	}
	return stream, nil
}

func startRequest(cmd Command, withStdin bool) *process.StartRequest {
	cfg := &process.ProcessConfig{Cmd: cmd.Cmd, Args: cmd.Args, Envs: cmd.Env}
	if cmd.Cwd != "" {
		cfg.Cwd = &cmd.Cwd
	}
	req := &process.StartRequest{Process: cfg, Stdin: &withStdin}
	if cmd.Tag != "" {
		req.Tag = &cmd.Tag
	}
	if cmd.PTY != nil {
		req.Pty = &process.PTY{Size: &process.PTY_Size{Cols: cmd.PTY.Cols, Rows: cmd.PTY.Rows}}
	}
	return req
}

// wrapCallError keeps connect errors as they are; anything else (which
// connect-go does not produce, but a transport might) becomes unavailable.
func wrapCallError(what string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s: %w", what, err))
}

// runEvent is what the receiving goroutine passes to Run. Output is not
// among it: the receiving goroutine records that itself (runner.record).
type runEvent struct {
	start *process.ProcessEvent_StartEvent
	end   *process.ProcessEvent_EndEvent
	err   error
	// unopened marks an err of the Start call itself (no stream).
	unopened bool
}

// runner is the state of one Run.
type runner struct {
	c       *Client
	cmd     Command
	opts    RunOptions
	pid     uint32
	stdout  *capture
	stderr  *capture
	teeErr  error
	events  chan runEvent
	started chan struct{} // closed once Run has handled the start event
	stdinCh chan error
	done    chan struct{} // closed when Run returns

	// mu guards the output (stdout, stderr, teeErr, opts.Stdout and
	// opts.Stderr) and stopped while the receiving goroutine records a data
	// event. Output goes straight from the stream to the captures and
	// writers, without a hand-off to Run's goroutine per message.
	mu      sync.Mutex
	stopped bool // Run is returning: record no more output

	killOnce sync.Once
}

// record records one data event in the receiving goroutine. It reports
// false once Run stopped taking output.
func (r *runner) record(d *process.ProcessEvent_DataEvent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		releaseData(d)
		return false
	}
	r.data(d)
	return true
}

// stop makes the receiving goroutine record no more output, and waits for
// a data event it is recording (a tee writer's Write) to finish, so that no
// writer is used after Run returns.
func (r *runner) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
}

// receive opens the stream and reads it until the end event, an error, or
// the end of Run: output it records itself, the other events it passes to
// Run through r.events.
func (r *runner) receive(ctx context.Context) {
	send := func(ev runEvent) bool {
		select {
		case r.events <- ev:
			return true
		case <-r.done:
			return false
		}
	}
	stream, err := r.c.startStream(ctx, r.cmd, r.cmd.Stdin != nil)
	if err != nil {
		send(runEvent{err: err, unopened: true})
		return
	}
	defer stream.Close()
	sawStart := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			sawStart = true
			if !send(runEvent{start: ev.GetStart()}) {
				return
			}
			// Output is recorded only after OnStart has run.
			select {
			case <-r.started:
			case <-r.done:
				return
			}
		case ev.GetData() != nil:
			if !r.record(ev.GetData()) {
				return
			}
		case ev.GetEnd() != nil:
			send(runEvent{end: ev.GetEnd()})
			return
		}
	}
	err = stream.Err()
	if err == nil {
		err = &StreamCutError{What: "process stream"}
	}
	send(runEvent{err: asStreamError(err, sawStart)})
}

// asStreamError classifies a stream's terminal error: once the process
// started, a transport failure is a cut stream (the process may have run).
func asStreamError(err error, started bool) error {
	var cut *StreamCutError
	if errors.As(err, &cut) {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	if ce := new(connect.Error); errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal:
			if started && !errors.Is(err, context.Canceled) {
				return connect.NewError(connect.CodeUnavailable, &StreamCutError{What: "process stream", Err: err})
			}
		}
		return ce
	}
	if started {
		return connect.NewError(connect.CodeUnavailable, &StreamCutError{What: "process stream", Err: err})
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// data records one data event and then recycles its output buffer.
func (r *runner) data(d *process.ProcessEvent_DataEvent) {
	var p []byte
	var cap *capture
	var tee *io.Writer
	switch out := d.GetOutput().(type) {
	case *process.ProcessEvent_DataEvent_Stdout:
		p, cap, tee = out.Stdout, r.stdout, &r.opts.Stdout
	case *process.ProcessEvent_DataEvent_Stderr:
		p, cap, tee = out.Stderr, r.stderr, &r.opts.Stderr
	case *process.ProcessEvent_DataEvent_Pty:
		p, cap, tee = out.Pty, r.stdout, &r.opts.Stdout
	default:
		return
	}
	_, _ = cap.Write(p)
	if *tee != nil {
		if _, err := (*tee).Write(p); err != nil {
			if r.teeErr == nil {
				r.teeErr = err
			}
			*tee = nil
		}
	}
	releaseData(d)
}

// result builds the Result from the end event.
func (r *runner) result(end *process.ProcessEvent_EndEvent, d time.Duration) *Result {
	res := &Result{
		Pid:      r.pid,
		Tag:      r.cmd.Tag,
		Stdout:   r.stdout.output(),
		Stderr:   r.stderr.output(),
		ExitCode: int(end.GetExitCode()),
		Exited:   end.GetExited(),
		Status:   end.GetStatus(),
		Error:    end.GetError(),
		Duration: d,
		TeeErr:   r.teeErr,
	}
	interpretEnd(res, r.cmd.Timeout)
	return res
}

// interpretEnd fills ExitCode, Signal and TimedOut from envd's texts: envd
// reports -1 for a death by signal, which becomes 128+signal here.
func interpretEnd(res *Result, timeout time.Duration) {
	if !res.Exited {
		if name, ok := strings.CutPrefix(res.Status, "signal: "); ok {
			res.Signal = name
			if n, ok := signalNumber(name); ok {
				res.ExitCode = 128 + n
			} else if res.ExitCode == 0 {
				res.ExitCode = -1
			}
		} else if res.ExitCode == 0 {
			res.ExitCode = -1
		}
		deadlineText := strings.Contains(res.Error, "deadline") || strings.Contains(res.Error, "Connect-Timeout-Ms")
		if timeout > 0 && (deadlineText || res.Duration >= timeout) {
			res.TimedOut = true
		}
	}
}

// signalNumber maps Go's signal names ("killed", "terminated", …), which envd
// reports in status, back to numbers.
func signalNumber(name string) (int, bool) {
	// Strip suffixes such as " (core dumped)".
	if i := strings.Index(name, " ("); i >= 0 {
		name = name[:i]
	}
	for n := 1; n < 65; n++ {
		if syscall.Signal(n).String() == name {
			return n, true
		}
	}
	if s, ok := strings.CutPrefix(name, "signal "); ok {
		if n, err := strconv.Atoi(s); err == nil {
			return n, true
		}
	}
	return 0, false
}

// feedStdin streams cmd.Stdin to the process and closes its stdin at EOF. A
// process that ended or closed its stdin first is not an error.
func (r *runner) feedStdin(ctx context.Context) error {
	sel := ByPid(r.pid)
	err := r.c.streamInput(ctx, sel, r.cmd.Stdin)
	if err == nil {
		err = r.c.CloseStdin(ctx, sel)
	}
	if err == nil || IsStdinGone(err) {
		return nil
	}
	if connect.CodeOf(err) == connect.CodeCanceled && ctx.Err() != nil {
		return nil
	}
	return err
}

// IsStdinGone reports whether err means the selected process no longer
// takes input: its stdin pipe is closed (or was never opened), or the
// process ended and envd no longer knows its pid.
func IsStdinGone(err error) bool {
	if IsNotFound(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "stdin not enabled or closed") || strings.Contains(msg, "broken pipe") ||
		strings.Contains(msg, "file already closed")
}

// kill ends the process (by pid once known, else by tag), bounded by the kill
// timeout; a process already gone counts as killed.
func (r *runner) kill() {
	r.killOnce.Do(func() {
		sel := ByTag(r.cmd.Tag)
		if r.pid != 0 {
			sel = ByPid(r.pid)
		}
		r.c.killBounded(sel)
	})
}

// abandon kills the process of a Run whose caller went away (see
// Client.abandon), taking a late start event from the receive loop.
func (r *runner) abandon() {
	r.killOnce.Do(func() {
		r.c.abandon(r.cmd.Tag, r.pid, func(expired <-chan time.Time) uint32 {
			for {
				select {
				case ev := <-r.events:
					if ev.start != nil {
						return ev.start.GetPid()
					}
					if ev.end != nil || ev.err != nil {
						return 0
					}
				case <-expired:
					return 0
				}
			}
		})
	})
}

// killBounded kills sel, bounded by the kill timeout; a process already gone
// counts as killed.
func (c *Client) killBounded(sel Selector) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.killTimeout)
	defer cancel()
	_ = c.Kill(ctx, sel)
}

// abandon kills the process of a Run or Start whose caller went away. With
// the pid known it kills by pid. Before that it kills by tag, then waits
// (within the kill timeout) for a late start event, so a process spawned
// after the kill by tag is still ended: latePid returns the pid the start
// event carried, or 0 when the stream ended without one or expired fired.
func (c *Client) abandon(tag string, pid uint32, latePid func(expired <-chan time.Time) uint32) {
	if pid != 0 {
		c.killBounded(ByPid(pid))
		return
	}
	timer := time.NewTimer(c.opts.killTimeout)
	defer timer.Stop()
	c.killBounded(ByTag(tag))
	if pid := latePid(timer.C); pid != 0 {
		c.killBounded(ByPid(pid))
	}
}

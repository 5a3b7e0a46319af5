package envdclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/proto/process"
)

// Selector picks a process by pid or by tag. Build it with ByPid or ByTag.
type Selector struct {
	Pid uint32
	Tag string
}

// ByPid selects the process with pid.
func ByPid(pid uint32) Selector { return Selector{Pid: pid} }

// ByTag selects the newest live process tagged tag.
func ByTag(tag string) Selector { return Selector{Tag: tag} }

func (s Selector) String() string {
	if s.Pid != 0 {
		return fmt.Sprintf("pid %d", s.Pid)
	}
	return fmt.Sprintf("tag %q", s.Tag)
}

func (s Selector) proto() *process.ProcessSelector {
	if s.Pid != 0 {
		return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: s.Pid}}
	}
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: s.Tag}}
}

// Signal is a signal envd delivers: only SIGTERM and SIGKILL exist in its
// protocol.
type Signal int

// The signals envd accepts.
const (
	SIGTERM Signal = 15
	SIGKILL Signal = 9
)

// ProcessInfo describes a live process.
type ProcessInfo struct {
	Pid  uint32
	Tag  string
	Cmd  string
	Args []string
	Env  map[string]string
	Cwd  string
}

// List returns envd's live processes.
func (c *Client) List(ctx context.Context) ([]ProcessInfo, error) {
	resp, err := c.procs.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		return nil, wrapCallError("list processes", err)
	}
	out := make([]ProcessInfo, 0, len(resp.Msg.GetProcesses()))
	for _, p := range resp.Msg.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, ProcessInfo{
			Pid: p.GetPid(), Tag: p.GetTag(),
			Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Env: cfg.GetEnvs(), Cwd: cfg.GetCwd(),
		})
	}
	return out, nil
}

// SendSignal delivers sig to the selected process (envd: its process group).
func (c *Client) SendSignal(ctx context.Context, sel Selector, sig Signal) error {
	_, err := c.procs.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{
		Process: sel.proto(),
		Signal:  process.Signal(sig),
	}))
	if err != nil {
		return wrapCallError("signal "+sel.String(), err)
	}
	return nil
}

// Kill sends SIGKILL to the selected process. A process that is already gone
// counts as killed: Kill returns nil.
func (c *Client) Kill(ctx context.Context, sel Selector) error {
	err := c.SendSignal(ctx, sel, SIGKILL)
	if IsNotFound(err) {
		return nil
	}
	return err
}

// SendInput writes data to the selected process's stdin pipe. For a PTY
// process use SendPTYInput.
func (c *Client) SendInput(ctx context.Context, sel Selector, data []byte) error {
	return c.sendInput(ctx, sel, &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: data}})
}

// SendPTYInput writes data to the selected PTY process's terminal, as if
// typed (a "\r" is Enter, "\x04" Ctrl+D).
func (c *Client) SendPTYInput(ctx context.Context, sel Selector, data []byte) error {
	return c.sendInput(ctx, sel, &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: data}})
}

func (c *Client) sendInput(ctx context.Context, sel Selector, in *process.ProcessInput) error {
	_, err := c.procs.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel.proto(), Input: in}))
	if err != nil {
		return wrapCallError("send input to "+sel.String(), err)
	}
	return nil
}

// CloseStdin closes the selected process's stdin, so it reads EOF. Closing
// twice is not an error. It needs envd 0.5.2 or newer.
func (c *Client) CloseStdin(ctx context.Context, sel Selector) error {
	v, err := c.Version(ctx)
	if err != nil {
		return err
	}
	if !atLeast(v, versionCloseStdin) {
		return connect.NewError(connect.CodeUnimplemented,
			fmt.Errorf("envd %s cannot close stdin (needs %s or newer)", v, versionCloseStdin))
	}
	_, err = c.procs.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel.proto()}))
	if err != nil {
		return wrapCallError("close stdin of "+sel.String(), err)
	}
	return nil
}

// Resize changes a PTY process's terminal size.
func (c *Client) Resize(ctx context.Context, sel Selector, size PTYSize) error {
	_, err := c.procs.Update(ctx, connect.NewRequest(&process.UpdateRequest{
		Process: sel.proto(),
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: size.Cols, Rows: size.Rows}},
	}))
	if err != nil {
		return wrapCallError("resize "+sel.String(), err)
	}
	return nil
}

// streamInput copies r to the process's stdin over one StreamInput call, in
// chunks of at most 32 KiB.
func (c *Client) streamInput(ctx context.Context, sel Selector, r io.Reader) error {
	stream := c.procs.StreamInput(ctx)
	if err := stream.Send(&process.StreamInputRequest{Event: &process.StreamInputRequest_Start{
		Start: &process.StreamInputRequest_StartEvent{Process: sel.proto()},
	}}); err != nil {
		_, cerr := stream.CloseAndReceive()
		return firstErr(cerr, wrapCallError("stdin of "+sel.String(), err))
	}
	buf := make([]byte, stdinChunk)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			chunk := make([]byte, n) // the frame is marshalled later; never reuse buf under it
			copy(chunk, buf[:n])
			if err := stream.Send(&process.StreamInputRequest{Event: &process.StreamInputRequest_Data{
				Data: &process.StreamInputRequest_DataEvent{Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: chunk}}},
			}}); err != nil {
				// The server ended the call; its answer says why.
				_, cerr := stream.CloseAndReceive()
				return firstErr(cerr, wrapCallError("stdin of "+sel.String(), err))
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			_, _ = stream.CloseAndReceive()
			return connect.NewError(connect.CodeAborted, fmt.Errorf("reading stdin for %s: %w", sel, rerr))
		}
	}
	if _, err := stream.CloseAndReceive(); err != nil {
		return wrapCallError("stdin of "+sel.String(), err)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Handle is a process running in the background: started with Start or
// attached with Connect. Its event stream is read in a goroutine; the process
// keeps running if the handle is dropped (Disconnect) — only Kill ends it.
type Handle struct {
	c      *Client
	pid    uint32
	tag    string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	result *Result
	err    error
}

// StartOptions configures Start: what the Handle keeps of the output (the
// fields and defaults of RunOptions) and whether the process gets a stdin
// pipe.
type StartOptions struct {
	// StdoutLimit and StderrLimit bound the bytes kept in memory per stream
	// (head and tail). Zero means DefaultCaptureLimit; negative keeps none.
	StdoutLimit, StderrLimit int
	// Stdout and Stderr, when set, receive the whole stream as it arrives.
	// A writer that fails stops receiving; Result.TeeErr says why.
	Stdout, Stderr io.Writer
	// OnStart is called with the pid once the process started.
	OnStart func(pid uint32)
	// Stdin gives the process a stdin pipe, written with SendInput and
	// closed with CloseStdin. False (the default, as in E2B's SDKs) means
	// none: stdin is /dev/null. A PTY process reads its terminal either way.
	Stdin bool
}

// output returns the options that say what is kept of the output.
func (o StartOptions) output() RunOptions {
	return RunOptions{StdoutLimit: o.StdoutLimit, StderrLimit: o.StderrLimit, Stdout: o.Stdout, Stderr: o.Stderr, OnStart: o.OnStart}
}

// Start starts cmd in the background and returns once envd reported its pid.
// Output is captured and teed as opts says until the process ends or the
// handle disconnects. cmd.Stdin must be nil: use SendInput and CloseStdin on
// the handle, whose stdin pipe exists when opts.Stdin is true.
//
// When ctx ends before the pid is known, the process is killed as an
// abandoned Run's is (by tag, then by pid if its start event still comes,
// bounded by the kill timeout), and Start returns ctx's error.
func (c *Client) Start(ctx context.Context, cmd Command, opts StartOptions) (*Handle, error) {
	if cmd.Stdin != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("Start takes no Stdin reader; use Handle.SendInput"))
	}
	if cmd.Tag == "" {
		cmd.Tag = newTag()
	}
	open := func(streamCtx context.Context) (*connect.ServerStreamForClient[process.StartResponse], error) {
		return c.startStream(streamCtx, cmd, opts.Stdin)
	}
	return attachStream[*process.StartResponse](c, ctx, open, cmd, opts.output(), true)
}

// Connect attaches to a running process (or one that ended within envd's
// retention window) and returns its handle. Output from before the attach is
// not replayed. What the handle keeps of the output is as for Run.
func (c *Client) Connect(ctx context.Context, sel Selector, opts RunOptions) (*Handle, error) {
	open := func(streamCtx context.Context) (*connect.ServerStreamForClient[process.ConnectResponse], error) {
		req := connect.NewRequest(&process.ConnectRequest{Process: sel.proto()})
		c.streamHeaders(req.Header())
		stream, err := c.procs.Connect(streamCtx, req)
		if err != nil {
			return nil, wrapCallError("connect to "+sel.String(), err)
		}
		return stream, nil
	}
	return attachStream[*process.ConnectResponse](c, ctx, open, Command{Tag: sel.Tag}, opts, false)
}

// eventStream is what Start and Connect streams have in common.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
}

type eventMsg interface{ GetEvent() *process.ProcessEvent }

// attachStream opens a stream and waits for its start event, then reads the
// rest in a goroutine. The stream is opened in the goroutine that waits for
// the start event (envd answers the call only with that event), and it
// outlives ctx, so the caller can give up at any point and a late start
// event is still seen. started says the stream is a Start (not a Connect),
// whose process is killed (as an abandoned Run's) when the caller gives up
// before the start event.
func attachStream[T eventMsg, S interface {
	eventStream
	Msg() T
}](c *Client, ctx context.Context, open func(context.Context) (S, error), cmd Command, opts RunOptions, started bool) (*Handle, error) {
	streamCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	type first struct {
		stream S
		opened bool
		pid    uint32
		err    error
	}
	got := make(chan first, 1)
	go func() {
		stream, err := open(streamCtx)
		if err != nil {
			got <- first{err: err}
			return
		}
		if stream.Receive() {
			if s := stream.Msg().GetEvent().GetStart(); s != nil {
				got <- first{stream: stream, opened: true, pid: s.GetPid()}
				return
			}
			got <- first{stream: stream, opened: true, err: connect.NewError(connect.CodeInternal, errors.New("envd sent an event before the start event"))}
			return
		}
		err = stream.Err()
		if err == nil {
			err = &StreamCutError{What: "process stream"}
		}
		got <- first{stream: stream, opened: true, err: asStreamError(err, false)}
	}()
	var f first
	select {
	case f = <-got:
	case <-ctx.Done():
		received := false
		if started {
			// The caller gave up on a Start before hearing the pid: kill the
			// process (by tag, then by pid if its start event still comes),
			// so nothing it never heard of keeps running. The stream stays
			// open meanwhile, or the start event could never arrive.
			c.abandon(cmd.Tag, 0, func(expired <-chan time.Time) uint32 {
				select {
				case f = <-got:
					received = true
					return f.pid
				case <-expired:
					return 0
				}
			})
		}
		cancel()
		if !received {
			f = <-got // the reader is done with the stream before it is closed
		}
		if f.opened {
			f.stream.Close()
		}
		return nil, connect.NewError(codeForContext(ctx.Err()), ctx.Err())
	}
	if f.err != nil {
		cancel()
		if f.opened {
			f.stream.Close()
		}
		return nil, f.err
	}
	stream := f.stream
	if opts.OnStart != nil {
		opts.OnStart(f.pid)
	}
	h := &Handle{c: c, pid: f.pid, tag: cmd.Tag, cancel: cancel, done: make(chan struct{})}
	since := time.Now()
	go func() {
		defer close(h.done)
		defer stream.Close()
		r := &runner{cmd: cmd, opts: opts, pid: f.pid,
			stdout: newCapture(limitOr(opts.StdoutLimit)), stderr: newCapture(limitOr(opts.StderrLimit))}
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			if d := ev.GetData(); d != nil {
				r.data(d)
			}
			if end := ev.GetEnd(); end != nil {
				res := r.result(end, time.Since(since))
				h.mu.Lock()
				h.result = res
				h.mu.Unlock()
				return
			}
		}
		err := stream.Err()
		if err == nil {
			err = &StreamCutError{What: "process stream"}
		}
		h.mu.Lock()
		h.err = asStreamError(err, true)
		h.mu.Unlock()
	}()
	return h, nil
}

// Pid returns the process id.
func (h *Handle) Pid() uint32 { return h.pid }

// Tag returns the process tag ("" when attached by pid).
func (h *Handle) Tag() string { return h.tag }

// Done is closed when the process ended or the stream stopped.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait waits for the process to end and returns its Result. When ctx ends
// first, Wait returns ctx's error and the process keeps running. When the
// stream broke, the error satisfies IsPossibleLoss.
func (h *Handle) Wait(ctx context.Context) (*Result, error) {
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, connect.NewError(codeForContext(ctx.Err()), ctx.Err())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.result, h.err
}

// Disconnect stops reading the process's events; the process keeps running.
func (h *Handle) Disconnect() {
	h.cancel()
	<-h.done
}

// SendInput writes data to the process's stdin.
func (h *Handle) SendInput(ctx context.Context, data []byte) error {
	return h.c.SendInput(ctx, ByPid(h.pid), data)
}

// CloseStdin closes the process's stdin (EOF).
func (h *Handle) CloseStdin(ctx context.Context) error { return h.c.CloseStdin(ctx, ByPid(h.pid)) }

// Signal delivers sig to the process group.
func (h *Handle) Signal(ctx context.Context, sig Signal) error {
	return h.c.SendSignal(ctx, ByPid(h.pid), sig)
}

// Kill ends the process with SIGKILL; a process already gone counts as killed.
func (h *Handle) Kill(ctx context.Context) error { return h.c.Kill(ctx, ByPid(h.pid)) }

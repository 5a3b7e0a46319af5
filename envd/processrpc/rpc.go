//go:build linux

package processrpc

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/keepalive"
	"github.com/sandbox-mcp/sandbox-mcp/envd/process"
	pb "github.com/sandbox-mcp/sandbox-mcp/proto/process"
)

// Start spawns a process and streams its events: start{pid}, then data and
// keepalive events, then end. A client that goes away does not kill the
// process.
func (s *Service) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	spec, err := s.spec(ctx, req.Msg)
	if err != nil {
		return err
	}
	p, sub, err := s.table.Start(spec)
	if err != nil {
		return startError(err)
	}
	s.log.Debug("process started", "pid", p.Pid(), "cmd", spec.Cmd, "tag", spec.Tag, "pty", spec.PTY != nil)
	resp := &pb.StartResponse{}
	return s.stream(ctx, p, sub, keepalive.Interval(req.Header()), func(ev *pb.ProcessEvent) error {
		resp.Event = ev
		return stream.Send(resp)
	})
}

// Connect attaches to a process by pid or tag and streams start{pid}, then
// its events from now on. A process that ended within the retention period
// yields start and end.
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := s.find(req.Msg.GetProcess(), true)
	if err != nil {
		return err
	}
	resp := &pb.ConnectResponse{}
	return s.stream(ctx, p, p.Subscribe(), keepalive.Interval(req.Header()), func(ev *pb.ProcessEvent) error {
		resp.Event = ev
		return stream.Send(resp)
	})
}

// stream sends start, then sub's chunks and keepalives, then the end event.
// send must not keep the event after it returns: the data event and its
// payload are reused for every chunk.
func (s *Service) stream(ctx context.Context, p *process.Process, sub *process.Subscription, keepalive time.Duration, send func(*pb.ProcessEvent) error) error {
	defer sub.Close()
	start := &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(p.Pid())}}}
	if err := send(start); err != nil {
		return err
	}

	var (
		stdout = &pb.ProcessEvent_DataEvent_Stdout{}
		stderr = &pb.ProcessEvent_DataEvent_Stderr{}
		tty    = &pb.ProcessEvent_DataEvent_Pty{}
		data   = &pb.ProcessEvent_DataEvent{}
		dataEv = &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: data}}
		keepEv = &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}
	)
	timer := time.NewTimer(keepalive)
	defer timer.Stop()
	chunks := sub.Chunks()
	bw := batchWriterFrom(ctx)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case c, ok := <-chunks:
			if !ok {
				return send(endEvent(p, sub.End()))
			}
			switch c.Stream {
			case process.Stdout:
				stdout.Stdout = c.Bytes()
				data.Output = stdout
			case process.Stderr:
				stderr.Stderr = c.Bytes()
				data.Output = stderr
			default:
				tty.Pty = c.Bytes()
				data.Output = tty
			}
			// With more output already waiting, let it share the write.
			bw.holdFlush(len(chunks) > 0)
			err := send(dataEv)
			bw.holdFlush(false)
			stdout.Stdout, stderr.Stderr, tty.Pty = nil, nil, nil
			c.Release()
			if err != nil {
				return err
			}
			timer.Reset(keepalive)
		case <-timer.C:
			if err := send(keepEv); err != nil {
				return err
			}
			timer.Reset(keepalive)
		}
	}
}

func endEvent(p *process.Process, end process.End) *pb.ProcessEvent {
	ev := &pb.ProcessEvent_EndEvent{
		ExitCode: int32(end.ExitCode),
		Exited:   end.Exited,
		Status:   end.Status,
	}
	if end.Error != "" {
		msg := end.Error
		if end.DeadlineExceeded {
			spec := p.Spec()
			msg = fmt.Sprintf("%s (deadline of %d ms from %s exceeded)", msg, spec.Timeout.Milliseconds(), spec.TimeoutSource)
		}
		ev.Error = &msg
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: ev}}
}

// List returns the live processes: pid, tag and the config they were
// started with.
func (s *Service) List(_ context.Context, _ *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	procs := s.table.List()
	resp := &pb.ListResponse{Processes: make([]*pb.ProcessInfo, 0, len(procs))}
	for _, p := range procs {
		spec := p.Spec()
		info := &pb.ProcessInfo{
			Pid: uint32(p.Pid()),
			Config: &pb.ProcessConfig{
				Cmd:  spec.Cmd,
				Args: spec.Args,
				Envs: spec.Envs,
				Cwd:  spec.Cwd,
			},
		}
		if spec.Tag != "" {
			tag := spec.Tag
			info.Tag = &tag
		}
		resp.Processes = append(resp.Processes, info)
	}
	return connect.NewResponse(resp), nil
}

// SendInput writes one chunk of input to a live process's stdin or terminal.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.find(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := writeInput(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// StreamInput takes a start{process} frame, then data{input} frames, and
// writes each input to the process. Keepalive frames are ignored.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *process.Process
	for stream.Receive() {
		msg := stream.Msg()
		if p == nil {
			start, ok := msg.GetEvent().(*pb.StreamInputRequest_Start)
			if !ok {
				return nil, connect.NewError(connect.CodeInvalidArgument,
					fmt.Errorf("the first StreamInput frame must be start{process}, got %s", frameKind(msg)))
			}
			found, err := s.find(start.Start.GetProcess(), false)
			if err != nil {
				return nil, err
			}
			p = found
			continue
		}
		switch ev := msg.GetEvent().(type) {
		case *pb.StreamInputRequest_Data:
			if err := writeInput(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Keepalive:
		default:
			return nil, connect.NewError(connect.CodeInvalidArgument,
				fmt.Errorf("unexpected StreamInput frame %s after start", frameKind(msg)))
		}
	}
	if err := stream.Err(); err != nil {
		var cerr *connect.Error
		if errors.As(err, &cerr) {
			return nil, cerr
		}
		return nil, connect.NewError(connect.CodeUnknown, fmt.Errorf("error streaming input: %w", err))
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func frameKind(msg *pb.StreamInputRequest) string {
	switch msg.GetEvent().(type) {
	case *pb.StreamInputRequest_Start:
		return "start"
	case *pb.StreamInputRequest_Data:
		return "data"
	case *pb.StreamInputRequest_Keepalive:
		return "keepalive"
	}
	return "an empty frame"
}

// writeInput writes one input; a write blocked on a process that does not
// read ends when the call does (client gone or its deadline passed).
func writeInput(ctx context.Context, p *process.Process, in *pb.ProcessInput) error {
	var err error
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		err = p.WriteStdinContext(ctx, v.Stdin)
	case *pb.ProcessInput_Pty:
		err = p.WritePTY(v.Pty)
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input is empty: set stdin or pty"))
	}
	if err != nil {
		return inputError(err)
	}
	return nil
}

// CloseStdin closes a live process's stdin pipe. Closing it again, or
// closing a stdin that was never opened, succeeds. A PTY process fails with
// code unknown, as in envd: send Ctrl+D (0x04) instead.
func (s *Service) CloseStdin(_ context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.find(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := p.CloseStdin(); err != nil {
		return nil, connect.NewError(connect.CodeUnknown, err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// Update resizes a live PTY process's terminal. A request without pty does
// nothing; a process without a terminal fails with failed_precondition.
func (s *Service) Update(_ context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.find(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty != nil {
		if err := p.Resize(ptySize(req.Msg.Pty.GetSize())); err != nil {
			return nil, inputError(err)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// SendSignal delivers SIGTERM or SIGKILL to a live process's whole process
// group. Other signals fail with unimplemented, as in envd.
func (s *Service) SendSignal(_ context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := s.find(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	default:
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("invalid signal: %d", int32(req.Msg.GetSignal())))
	}
	if err := p.Signal(sig); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

//go:build linux

package processrpc

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/keepalive"
	pb "github.com/sandbox-mcp/sandbox-mcp/proto/process"
	"github.com/sandbox-mcp/sandbox-mcp/proto/process/processconnect"
)

func checkError(t testing.TB, err error, code connect.Code, msgPart string) {
	t.Helper()
	if err == nil {
		t.Errorf("no error, want %v %q", code, msgPart)
		return
	}
	if connect.CodeOf(err) != code || !strings.Contains(err.Error(), msgPart) {
		t.Errorf("error = %v (code %v), want code %v with %q", err, connect.CodeOf(err), code, msgPart)
	}
}

func TestBadInput(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	if err := os.WriteFile(filepath.Join(h.root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []processconnect.ProcessClient{h.h2, h.json} {
		// A pipe process without stdin, and a PTY process, to aim input at.
		plain := h.start(t, c, &pb.StartRequest{Process: cmd("sleep", "100"), Stdin: ptr(false), Tag: ptr("plain")}, nil)
		plainPid := plain.expectStart(t)
		tty := h.start(t, c, &pb.StartRequest{Process: cmd("sleep", "100"), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}}, nil)
		ttyPid := tty.expectStart(t)
		pidText := func(pid uint32) string { return strconv.Itoa(int(pid)) }

		startErr := func(req *pb.StartRequest) error {
			s, err := c.Start(testContext(t), connect.NewRequest(req))
			if err != nil {
				return err
			}
			defer s.Close()
			if s.Receive() {
				return errors.New("Start sent an event: " + s.Msg().String())
			}
			return s.Err()
		}
		ctx := testContext(t)
		stdin := func(b string) *pb.ProcessInput {
			return &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(b)}}
		}
		ptyIn := func(b string) *pb.ProcessInput { return &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(b)}} }
		for _, tc := range []struct {
			name string
			call func() error
			code connect.Code
			msg  string
		}{
			{"unknown command", func() error { return startErr(&pb.StartRequest{Process: cmd("no-such-command-xyz")}) },
				connect.CodeNotFound, "executable file not found: no-such-command-xyz"},
			{"empty command", func() error { return startErr(&pb.StartRequest{Process: cmd("")}) },
				connect.CodeInvalidArgument, "cmd is empty"},
			{"missing cwd", func() error {
				return startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Cwd: ptr("nope")}})
			}, connect.CodeInvalidArgument, "cwd 'nope' does not exist"},
			{"cwd is a file", func() error {
				return startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Cwd: ptr("file")}})
			}, connect.CodeInvalidArgument, "cwd 'file' is not a directory"},
			{"cwd ~user", func() error {
				return startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Cwd: ptr("~root")}})
			}, connect.CodeInvalidArgument, `"~root"`},
			{"cwd outside the root", func() error {
				return startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Cwd: ptr("/etc")}})
			}, connect.CodePermissionDenied, `"/etc"`},
			{"bad env name", func() error {
				return startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Envs: map[string]string{"A=B": "x"}}})
			}, connect.CodeInvalidArgument, `"A=B"`},
			{"unknown pid", func() error {
				s, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: byPid(999999)}))
				if err != nil {
					return err
				}
				defer s.Close()
				s.Receive()
				return s.Err()
			}, connect.CodeNotFound, "process with pid 999999 not found"},
			{"unknown tag", func() error {
				_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: byTag("nope"), Signal: pb.Signal_SIGNAL_SIGKILL}))
				return err
			}, connect.CodeNotFound, "process with tag 'nope' not found"},
			{"empty selector", func() error {
				_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{}, Signal: pb.Signal_SIGNAL_SIGKILL}))
				return err
			}, connect.CodeInvalidArgument, "selector is empty"},
			{"invalid signal", func() error {
				_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: byPid(plainPid), Signal: pb.Signal(2)}))
				return err
			}, connect.CodeUnimplemented, "invalid signal: 2"},
			{"unspecified signal", func() error {
				_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: byPid(plainPid)}))
				return err
			}, connect.CodeUnimplemented, "invalid signal: 0"},
			{"stdin to a process without stdin", func() error {
				_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: byTag("plain"), Input: stdin("x")}))
				return err
			}, connect.CodeInternal, "stdin not enabled or closed for process with pid " + pidText(plainPid)},
			{"stdin to a PTY process", func() error {
				_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: byPid(ttyPid), Input: stdin("x")}))
				return err
			}, connect.CodeFailedPrecondition, "tty assigned to process with pid " + pidText(ttyPid) + "; send pty input instead"},
			{"pty input to a pipe process", func() error {
				_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: byPid(plainPid), Input: ptyIn("x")}))
				return err
			}, connect.CodeFailedPrecondition, "no tty assigned to process with pid " + pidText(plainPid)},
			{"empty input", func() error {
				_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: byPid(plainPid)}))
				return err
			}, connect.CodeInvalidArgument, "input is empty"},
			{"CloseStdin of a PTY process", func() error {
				_, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: byPid(ttyPid)}))
				return err
			}, connect.CodeUnknown, "send Ctrl+D (0x04) instead"},
			{"resize a pipe process", func() error {
				_, err := c.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: byPid(plainPid), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 1, Rows: 1}}}))
				return err
			}, connect.CodeFailedPrecondition, "no tty assigned to process with pid " + pidText(plainPid)},
			{"StreamInput without start", func() error {
				in := c.StreamInput(ctx)
				_ = in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: stdin("x")}}})
				_, err := in.CloseAndReceive()
				return err
			}, connect.CodeInvalidArgument, "first StreamInput frame must be start{process}, got data"},
			{"StreamInput to an unknown tag", func() error {
				in := c.StreamInput(ctx)
				_ = in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: byTag("ghost")}}})
				_, err := in.CloseAndReceive()
				return err
			}, connect.CodeNotFound, "process with tag 'ghost' not found"},
		} {
			checkError(t, tc.call(), tc.code, tc.msg)
		}
		// CloseStdin of a process that never had stdin is fine.
		if _, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: byPid(plainPid)})); err != nil {
			t.Errorf("CloseStdin without stdin: %v", err)
		}
		h.signal(t, byPid(plainPid), pb.Signal_SIGNAL_SIGKILL)
		h.signal(t, byPid(ttyPid), pb.Signal_SIGNAL_SIGKILL)
		(&result{}).collectRest(t, plain)
		(&result{}).collectRest(t, tty)
	}
}

// A Start request as E2B's SDKs send it, checked at the byte level: Connect
// protocol with the JSON codec over HTTP/1.1, enveloped frames, camelCase
// protobuf-JSON events, and no response compression even when gzip is
// offered.
func TestWireFormatOfE2BSDKs(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	_, handler := h.svc.Handler()
	body := []byte(`{"process":{"cmd":"sh","args":["-c","echo hi; exit 2"]},"stdin":false}`)
	frame := append([]byte{0, 0, 0, 0, byte(len(body))}, body...)
	req := httptest.NewRequest(http.MethodPost, processconnect.ProcessStartProcedure, bytes.NewReader(frame))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Accept-Encoding", "gzip")
	req.Header.Set(keepalive.Header, "50")
	req.Header.Set(TimeoutHeader, "60000")
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)

	if ct := rec.Header().Get("Content-Type"); ct != "application/connect+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var frames []string
	var flags []byte
	b := rec.Body.Bytes()
	for len(b) >= 5 {
		n := int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4])
		if len(b) < 5+n {
			t.Fatalf("truncated frame in %q", rec.Body.String())
		}
		flags = append(flags, b[0])
		frames = append(frames, string(b[5:5+n]))
		b = b[5+n:]
	}
	if len(frames) != 4 {
		t.Fatalf("frames = %q", frames)
	}
	for i, f := range flags {
		if f&0x01 != 0 {
			t.Errorf("frame %d is compressed", i)
		}
	}
	compact := func(s string) string { return strings.ReplaceAll(s, " ", "") }
	if !strings.HasPrefix(compact(frames[0]), `{"event":{"start":{"pid":`) {
		t.Errorf("frame 0 = %s", frames[0])
	}
	if got := compact(frames[1]); got != `{"event":{"data":{"stdout":"aGkK"}}}` {
		t.Errorf("frame 1 = %s", frames[1])
	}
	if got := compact(frames[2]); got != `{"event":{"end":{"exitCode":2,"exited":true,"status":"exitstatus2","error":"exitstatus2"}}}` {
		t.Errorf("frame 2 = %s", frames[2])
	}
	if flags[3] != 0x02 || compact(frames[3]) != "{}" {
		t.Errorf("end-stream frame: flags %#x, %s", flags[3], frames[3])
	}
}

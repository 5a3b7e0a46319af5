//go:build linux

package processrpc

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/sandbox-mcp/sandbox-mcp/proto/process"
	"github.com/sandbox-mcp/sandbox-mcp/proto/process/processconnect"
)

func TestSignals(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	for _, tc := range []struct {
		sig    pb.Signal
		status string
		sel    func(pid uint32) *pb.ProcessSelector
	}{
		{pb.Signal_SIGNAL_SIGKILL, "signal: killed", byPid},
		{pb.Signal_SIGNAL_SIGTERM, "signal: terminated", func(uint32) *pb.ProcessSelector { return byTag("victim") }},
	} {
		ev := h.start(t, h.h2, &pb.StartRequest{Process: cmd("sleep", "100"), Tag: ptr("victim")}, nil)
		pid := ev.expectStart(t)
		h.signal(t, tc.sel(pid), tc.sig)
		r := &result{pid: pid}
		r.collectRest(t, ev)
		if r.end.GetExitCode() != -1 || r.end.GetExited() || r.end.GetStatus() != tc.status || r.end.GetError() != tc.status {
			t.Errorf("%v: end = %v", tc.sig, r.end)
		}
	}
}

func TestDeadlineKillsProcessGroup(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	pidFile := filepath.Join(h.root, "grandchild.pid")
	r := collect(t, h.start(t, h.h2, &pb.StartRequest{
		Process: cmd("sh", "-c", `sleep 100 & echo $! > "$1"; wait`, "sh", pidFile),
	}, map[string]string{TimeoutHeader: "2000"}))
	const wantErr = "signal: killed (deadline of 2000 ms from Connect-Timeout-Ms exceeded)"
	if r.end.GetExitCode() != -1 || r.end.GetExited() || r.end.GetStatus() != "signal: killed" || r.end.GetError() != wantErr {
		t.Errorf("end = %v, want error %q", r.end, wantErr)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the grandchild did not write its pid before the deadline: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)

	// Zero means no deadline.
	r = collect(t, h.start(t, h.h2, &pb.StartRequest{Process: cmd("true")}, map[string]string{TimeoutHeader: "0"}))
	if r.end.GetExitCode() != 0 {
		t.Errorf("with timeout 0: end = %v", r.end)
	}
}

// gRPC and gRPC-Web carry Start's deadline in Grpc-Timeout. It is the
// process's deadline too: the process is killed then, and the stream still
// delivers the end event saying so.
func TestDeadlineOverGRPC(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	for name, c := range map[string]processconnect.ProcessClient{
		"grpc-h2c":           processconnect.NewProcessClient(h.h2c, h.url, connect.WithGRPC()),
		"grpc-json-h2c":      processconnect.NewProcessClient(h.h2c, h.url, connect.WithGRPC(), connect.WithProtoJSON()),
		"grpc-web-http1":     processconnect.NewProcessClient(h.h1, h.url, connect.WithGRPCWeb()),
		"grpc-web-json-h2c":  processconnect.NewProcessClient(h.h2c, h.url, connect.WithGRPCWeb(), connect.WithProtoJSON()),
		"grpc-web-json-http": processconnect.NewProcessClient(h.h1, h.url, connect.WithGRPCWeb(), connect.WithProtoJSON()),
	} {
		t.Run(name, func(t *testing.T) {
			r := collect(t, h.start(t, c, &pb.StartRequest{Process: cmd("sleep", "100")}, map[string]string{GRPCTimeoutHeader: "300m"}))
			const wantErr = "signal: killed (deadline of 300 ms from Grpc-Timeout exceeded)"
			if r.end.GetExitCode() != -1 || r.end.GetExited() || r.end.GetStatus() != "signal: killed" || r.end.GetError() != wantErr {
				t.Errorf("end = %v, want error %q", r.end, wantErr)
			}
			waitGone(t, int(r.pid))

			// Zero means no deadline, as with Connect-Timeout-Ms.
			r = collect(t, h.start(t, c, &pb.StartRequest{Process: cmd("true")}, map[string]string{GRPCTimeoutHeader: "0n"}))
			if r.end.GetExitCode() != 0 || r.end.Error != nil {
				t.Errorf("with timeout 0n: end = %v", r.end)
			}

			// Connect-Timeout-Ms is not gRPC's header: it sets no deadline.
			r = collect(t, h.start(t, c, &pb.StartRequest{Process: cmd("sh", "-c", "exit 3")}, map[string]string{TimeoutHeader: "1"}))
			if r.end.GetExitCode() != 3 {
				t.Errorf("with Connect-Timeout-Ms over gRPC: end = %v", r.end)
			}

			// A malformed value is refused, as connect-go refuses it.
			for _, bad := range []string{"5x", "123456789S", "-1S", "S"} {
				cr := connect.NewRequest(&pb.StartRequest{Process: cmd("true")})
				cr.Header().Set(GRPCTimeoutHeader, bad)
				s, err := c.Start(testContext(t), cr)
				if err == nil {
					for s.Receive() {
						t.Errorf("Grpc-Timeout %q: got event %v", bad, s.Msg().GetEvent())
					}
					err = s.Err()
					_ = s.Close()
				}
				if connect.CodeOf(err) != connect.CodeInvalidArgument {
					t.Errorf("Grpc-Timeout %q: %v, want invalid_argument", bad, err)
				}
			}
		})
	}
}

// The Connect protocol's timeout header is not taken for gRPC's: over
// Connect, Grpc-Timeout sets no deadline.
func TestGRPCTimeoutIgnoredOverConnect(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	r := collect(t, h.start(t, h.h2, &pb.StartRequest{Process: cmd("sh", "-c", "exit 3")}, map[string]string{GRPCTimeoutHeader: "1n"}))
	if r.end.GetExitCode() != 3 {
		t.Errorf("end = %v", r.end)
	}
}

func TestTakeDeadline(t *testing.T) {
	for _, tc := range []struct {
		contentType, header, value string
		want                       time.Duration
		ok                         bool
	}{
		{"application/connect+proto", TimeoutHeader, "2000", 2 * time.Second, true},
		{"application/connect+json", TimeoutHeader, "0", 0, true},
		{"application/connect+json", TimeoutHeader, "12345678901", 0, false},
		{"application/connect+json", TimeoutHeader, "-5", 0, false},
		{"application/connect+json", TimeoutHeader, "", 0, false},
		{"application/connect+json", GRPCTimeoutHeader, "5S", 0, false},
		{"application/grpc", GRPCTimeoutHeader, "5S", 5 * time.Second, true},
		{"application/grpc+proto", GRPCTimeoutHeader, "2H", 2 * time.Hour, true},
		{"application/grpc+json", GRPCTimeoutHeader, "3M", 3 * time.Minute, true},
		{"application/grpc-web", GRPCTimeoutHeader, "250m", 250 * time.Millisecond, true},
		{"application/grpc-web+proto", GRPCTimeoutHeader, "7u", 7 * time.Microsecond, true},
		{"Application/GRPC-Web+json", GRPCTimeoutHeader, "9n", 9, true},
		{"application/grpc", GRPCTimeoutHeader, "99999999H", 0, true}, // too long for a Duration: no deadline
		{"application/grpc", GRPCTimeoutHeader, "100000000S", 0, false},
		{"application/grpc", GRPCTimeoutHeader, "5s", 0, false},
		{"application/grpc", GRPCTimeoutHeader, "", 0, false},
		{"application/grpc", TimeoutHeader, "2000", 0, false},
	} {
		h := http.Header{}
		h.Set("Content-Type", tc.contentType)
		if tc.value != "" {
			h.Set(tc.header, tc.value)
		}
		got, ok := takeDeadline(h)
		if ok != tc.ok || got.timeout != tc.want {
			t.Errorf("%s with %s: %q = %v, %v; want %v, %v", tc.contentType, tc.header, tc.value, got.timeout, ok, tc.want, tc.ok)
			continue
		}
		wantLeft := tc.value
		if ok {
			wantLeft = ""
		}
		if left := h.Get(tc.header); left != wantLeft {
			t.Errorf("%s with %s: %q: header left %q, want %q", tc.contentType, tc.header, tc.value, left, wantLeft)
		}
		if ok && got.header != tc.header {
			t.Errorf("%s: deadline from %q, want %q", tc.contentType, got.header, tc.header)
		}
	}
}

func TestClientCancelDoesNotKill(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx, cancel := context.WithCancel(testContext(t))
	s, err := h.h2.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: cmd("sleep", "100"), Tag: ptr("survivor")}))
	if err != nil {
		t.Fatal(err)
	}
	pid := startStream(s).expectStart(t)
	cancel()
	_ = s.Close()

	// Reattach: still running.
	ev := h.connect(t, h.h2, byPid(pid), nil)
	if got := ev.expectStart(t); got != pid {
		t.Fatalf("Connect start pid = %d, want %d", got, pid)
	}
	list, err := h.h2.List(testContext(t), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Msg.GetProcesses()) != 1 || list.Msg.GetProcesses()[0].GetPid() != pid {
		t.Fatalf("List = %v", list.Msg)
	}
	h.signal(t, byTag("survivor"), pb.Signal_SIGNAL_SIGKILL)
	r := &result{pid: pid}
	r.collectRest(t, ev)
	if r.end.GetStatus() != "signal: killed" {
		t.Errorf("end = %v", r.end)
	}
}

func TestBackgroundGrandchildDoesNotDelayEnd(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	r := collect(t, h.start(t, h.h2, &pb.StartRequest{Process: cmd("bash", "-c", "sleep 100 & echo $!")}, nil))
	if r.end.GetExitCode() != 0 {
		t.Errorf("end = %v", r.end)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(r.stdout.String()))
	if err != nil {
		t.Fatalf("stdout %q: %v", r.stdout.String(), err)
	}
	if err := unix.Kill(pid, 0); err != nil {
		t.Errorf("the background sleep was killed: %v", err)
	}
	_ = unix.Kill(pid, unix.SIGKILL)
}

func TestCloseKillsEverything(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	var streams []*events
	for range 2 {
		ev := h.start(t, h.h2, &pb.StartRequest{Process: cmd("sh", "-c", "sleep 100 & sleep 100")}, nil)
		ev.expectStart(t)
		streams = append(streams, ev)
	}
	h.svc.Close()
	h.svc.Close()
	for _, ev := range streams {
		r := &result{}
		r.collectRest(t, ev)
		if r.end.GetStatus() != "signal: killed" {
			t.Errorf("end = %v", r.end)
		}
	}
	s, err := h.h2.Start(testContext(t), connect.NewRequest(&pb.StartRequest{Process: cmd("true")}))
	if err == nil {
		s.Receive()
		err = s.Err()
	}
	checkError(t, err, connect.CodeUnavailable, "closed")
}

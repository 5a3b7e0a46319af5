//go:build linux

package processrpc

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/keepalive"
	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
	"github.com/sandbox-mcp/sandbox-mcp/envd/process"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	pb "github.com/sandbox-mcp/sandbox-mcp/proto/process"
	"github.com/sandbox-mcp/sandbox-mcp/proto/process/processconnect"
)

// waitLimit bounds every wait in these tests; it only fires on failure.
const waitLimit = 30 * time.Second

type harness struct {
	svc  *Service
	root string
	user identity.User
	// h2 speaks binary protobuf over unencrypted HTTP/2 (our own client);
	// json speaks protobuf-JSON over HTTP/1.1 (E2B's SDKs).
	h2, json processconnect.ProcessClient
	// url, h2c and h1 make more clients: other protocols and codecs.
	url     string
	h2c, h1 *http.Client
}

type harnessConfig struct {
	root string         // default t.TempDir()
	user *identity.User // put in every request's context, as the daemon's middleware does
}

func newHarness(t testing.TB, cfg harnessConfig) *harness {
	t.Helper()
	root := cfg.root
	if root == "" {
		root = t.TempDir()
	}
	resolver, err := paths.New(root, true)
	if err != nil {
		t.Fatal(err)
	}
	users := identity.NewResolver(identity.ResolverOptions{Home: root})
	svc := New(Options{
		Paths: resolver,
		Users: users,
		Env:   map[string]string{"GLOBAL": "g", "OVERRIDE": "global"},
	})
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	var handler http.Handler = mux
	if cfg.user != nil {
		u := *cfg.user
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mux.ServeHTTP(w, r.WithContext(identity.WithUser(r.Context(), u)))
		})
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(svc.Close) // runs first: ends every stream, so srv.Close can finish

	h2 := &http.Transport{Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	h1 := &http.Transport{}
	t.Cleanup(h2.CloseIdleConnections)
	t.Cleanup(h1.CloseIdleConnections)
	h := &harness{
		svc:  svc,
		root: root,
		user: users.Lookup(""),
		url:  srv.URL,
		h2c:  &http.Client{Transport: h2},
		h1:   &http.Client{Transport: h1},
	}
	h.h2 = processconnect.NewProcessClient(h.h2c, srv.URL)
	h.json = processconnect.NewProcessClient(h.h1, srv.URL, connect.WithProtoJSON())
	if cfg.user != nil {
		h.user = *cfg.user
	}
	return h
}

// clients returns both clients by name, for tests that run over each.
func (h *harness) clients() map[string]processconnect.ProcessClient {
	return map[string]processconnect.ProcessClient{"h2c-binary": h.h2, "http1-json": h.json}
}

// testContext is cancelled after waitLimit or when the test ends. It has no
// deadline: a deadline would reach the server as Connect-Timeout-Ms.
func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(waitLimit, cancel)
	t.Cleanup(func() { timer.Stop(); cancel() })
	return ctx
}

// events is a server stream of process events (Start or Connect).
type events struct {
	receive func() bool
	event   func() *pb.ProcessEvent
	err     func() error
	close   func() error
}

func startStream(s *connect.ServerStreamForClient[pb.StartResponse]) *events {
	return &events{s.Receive, func() *pb.ProcessEvent { return s.Msg().GetEvent() }, s.Err, s.Close}
}

func connectStream(s *connect.ServerStreamForClient[pb.ConnectResponse]) *events {
	return &events{s.Receive, func() *pb.ProcessEvent { return s.Msg().GetEvent() }, s.Err, s.Close}
}

// next returns the next event, failing the test at the end of the stream.
func (e *events) next(t testing.TB) *pb.ProcessEvent {
	t.Helper()
	if !e.receive() {
		t.Fatalf("stream ended early: %v", e.err())
	}
	return e.event()
}

// expectStart reads the start event and returns the pid.
func (e *events) expectStart(t testing.TB) uint32 {
	t.Helper()
	ev := e.next(t)
	if ev.GetStart() == nil {
		t.Fatalf("first event is %v, want start", ev)
	}
	return ev.GetStart().GetPid()
}

type result struct {
	pid                 uint32
	stdout, stderr, pty bytes.Buffer
	maxChunk            int
	keepalives          int
	end                 *pb.ProcessEvent_EndEvent
}

// collect reads a whole stream and checks its shape: start first, then data
// and keepalives, then exactly one end, then the stream closes cleanly.
func collect(t testing.TB, e *events) *result {
	t.Helper()
	r := &result{pid: e.expectStart(t)}
	r.collectRest(t, e)
	return r
}

func (r *result) collectRest(t testing.TB, e *events) {
	t.Helper()
	for e.receive() {
		ev := e.event()
		if r.end != nil {
			t.Fatalf("event after end: %v", ev)
		}
		switch {
		case ev.GetStart() != nil:
			t.Fatalf("second start event: %v", ev)
		case ev.GetData() != nil:
			d := ev.GetData()
			var b []byte
			switch {
			case d.GetStdout() != nil:
				b = d.GetStdout()
				r.stdout.Write(b)
			case d.GetStderr() != nil:
				b = d.GetStderr()
				r.stderr.Write(b)
			case d.GetPty() != nil:
				b = d.GetPty()
				r.pty.Write(b)
			default:
				t.Fatalf("empty data event")
			}
			r.maxChunk = max(r.maxChunk, len(b))
		case ev.GetKeepalive() != nil:
			r.keepalives++
		case ev.GetEnd() != nil:
			r.end = ev.GetEnd()
		default:
			t.Fatalf("empty event")
		}
	}
	if err := e.err(); err != nil {
		t.Fatalf("stream error: %v", err)
	}
	if r.end == nil {
		t.Fatal("stream closed without an end event")
	}
}

func (h *harness) start(t testing.TB, c processconnect.ProcessClient, req *pb.StartRequest, header map[string]string) *events {
	t.Helper()
	cr := connect.NewRequest(req)
	for k, v := range header {
		cr.Header().Set(k, v)
	}
	s, err := c.Start(testContext(t), cr)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return startStream(s)
}

func (h *harness) connect(t testing.TB, c processconnect.ProcessClient, sel *pb.ProcessSelector, header map[string]string) *events {
	t.Helper()
	cr := connect.NewRequest(&pb.ConnectRequest{Process: sel})
	for k, v := range header {
		cr.Header().Set(k, v)
	}
	s, err := c.Connect(testContext(t), cr)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return connectStream(s)
}

func (h *harness) signal(t testing.TB, sel *pb.ProcessSelector, sig pb.Signal) {
	t.Helper()
	if _, err := h.h2.SendSignal(testContext(t), connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: sig})); err != nil {
		t.Fatalf("SendSignal: %v", err)
	}
}

func cmd(name string, args ...string) *pb.ProcessConfig {
	return &pb.ProcessConfig{Cmd: name, Args: args}
}

func byPid(pid uint32) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
}

func byTag(tag string) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}
}

func ptr[T any](v T) *T { return &v }

// waitGone blocks until process pid has exited, then checks /proc agrees:
// no entry, or a zombie.
func waitGone(t testing.TB, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, int(waitLimit/time.Millisecond))
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || n == 0 {
				t.Fatalf("process %d still running (poll: %d, %v)", pid, n, err)
			}
			break
		}
		unix.Close(fd)
	} else if !errors.Is(err, unix.ESRCH) {
		t.Logf("pidfd_open: %v; reading /proc only", err)
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return // reaped
	}
	// The state follows the parenthesised command name.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || len(stat) < i+3 || stat[i+2] != 'Z' {
		t.Errorf("process %d is still alive: %s", pid, stat)
	}
}

func TestArgsStreamsAndExitCodes(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	for name, c := range h.clients() {
		t.Run(name, func(t *testing.T) {
			r := collect(t, h.start(t, c, &pb.StartRequest{
				Process: cmd("sh", "-c", `printf '%s|' "$@"; echo; echo oops >&2; exit 3`, "sh", "a", "b c", ""),
			}, nil))
			if r.pid == 0 {
				t.Error("start pid is 0")
			}
			if got := r.stdout.String(); got != "a|b c||\n" {
				t.Errorf("stdout = %q", got)
			}
			if got := r.stderr.String(); got != "oops\n" {
				t.Errorf("stderr = %q", got)
			}
			if r.end.GetExitCode() != 3 || !r.end.GetExited() || r.end.GetStatus() != "exit status 3" || r.end.GetError() != "exit status 3" {
				t.Errorf("end = %v", r.end)
			}

			ok := collect(t, h.start(t, c, &pb.StartRequest{Process: cmd("true")}, nil))
			if ok.end.GetExitCode() != 0 || !ok.end.GetExited() || ok.end.GetStatus() != "exit status 0" || ok.end.Error != nil {
				t.Errorf("true: end = %v", ok.end)
			}
		})
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("SANDBOX_MCP_DAEMON_SECRET", "must-not-leak")
	h := newHarness(t, harnessConfig{})
	r := collect(t, h.start(t, h.h2, &pb.StartRequest{Process: &pb.ProcessConfig{
		Cmd:  "env",
		Envs: map[string]string{"REQ": "r", "OVERRIDE": "request", "HOME": "/custom-home"},
	}}, nil))
	got := strings.Split(strings.TrimSpace(r.stdout.String()), "\n")
	slices.Sort(got)
	want := []string{
		"GLOBAL=g",
		"HOME=/custom-home",
		"LOGNAME=" + h.user.Name,
		"OVERRIDE=request",
		"PATH=" + os.Getenv("PATH"),
		"REQ=r",
		"USER=" + h.user.Name,
	}
	if !slices.Equal(got, want) {
		t.Errorf("env:\n got %q\nwant %q", got, want)
	}

	r = collect(t, h.start(t, h.h2, &pb.StartRequest{Process: cmd("sh", "-c", `echo "$HOME"`)}, nil))
	if got := strings.TrimSpace(r.stdout.String()); got != h.user.Home {
		t.Errorf("HOME = %q, want the user's home %q", got, h.user.Home)
	}
}

func TestWorkingDirectory(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	if err := os.Mkdir(filepath.Join(h.root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(h.root)
	if err != nil {
		t.Fatal(err)
	}
	for cwd, want := range map[string]string{
		"":                              real,
		"sub":                           filepath.Join(real, "sub"),
		"~/sub":                         filepath.Join(real, "sub"),
		filepath.Join(h.root, "sub"):    filepath.Join(real, "sub"),
		filepath.Join(h.root, "sub/.."): real,
	} {
		r := collect(t, h.start(t, h.h2, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "pwd", Cwd: ptr(cwd)}}, nil))
		if got := strings.TrimSpace(r.stdout.String()); got != want {
			t.Errorf("cwd %q: pwd = %q, want %q", cwd, got, want)
		}
	}
}

func TestStdinWithEOF(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	for name, c := range h.clients() {
		t.Run(name, func(t *testing.T) {
			// stdin unset means a pipe. The shell outlives cat so that both
			// CloseStdin calls below reach a live process.
			ev := h.start(t, c, &pb.StartRequest{Process: cmd("sh", "-c", "cat; echo EOF; sleep 100")}, nil)
			pid := ev.expectStart(t)

			in := c.StreamInput(testContext(t))
			frames := []*pb.StreamInputRequest{
				{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: byPid(pid)}}},
				{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("hello\n")}}}}},
				{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
				{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("world\n")}}}}},
			}
			for _, f := range frames {
				if err := in.Send(f); err != nil {
					t.Fatalf("StreamInput send: %v", err)
				}
			}
			if _, err := in.CloseAndReceive(); err != nil {
				t.Fatalf("StreamInput: %v", err)
			}
			if _, err := c.SendInput(testContext(t), connect.NewRequest(&pb.SendInputRequest{
				Process: byPid(pid),
				Input:   &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("!\n")}},
			})); err != nil {
				t.Fatalf("SendInput: %v", err)
			}
			for range 2 { // idempotent
				if _, err := c.CloseStdin(testContext(t), connect.NewRequest(&pb.CloseStdinRequest{Process: byPid(pid)})); err != nil {
					t.Fatalf("CloseStdin: %v", err)
				}
			}
			var out bytes.Buffer
			for !strings.HasSuffix(out.String(), "EOF\n") {
				out.Write(ev.next(t).GetData().GetStdout())
			}
			if got := out.String(); got != "hello\nworld\n!\nEOF\n" {
				t.Errorf("stdout = %q", got)
			}
			h.signal(t, byPid(pid), pb.Signal_SIGNAL_SIGKILL)
			(&result{}).collectRest(t, ev)
		})
	}
}

func TestStdinDisabled(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	// With stdin:false, cat reads /dev/null and ends at once.
	r := collect(t, h.start(t, h.h2, &pb.StartRequest{Process: cmd("cat"), Stdin: ptr(false)}, nil))
	if r.stdout.Len() != 0 || r.end.GetExitCode() != 0 {
		t.Errorf("cat </dev/null: %q %v", r.stdout.String(), r.end)
	}
}

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

func TestReconnectByPidAndTag(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ctx, cancel := context.WithCancel(testContext(t))
	s, err := h.h2.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: cmd("sh", "-c", "read a; echo first $a; read b; echo second $b"),
		Tag:     ptr("rec"),
	}))
	if err != nil {
		t.Fatal(err)
	}
	pid := startStream(s).expectStart(t)
	cancel()

	send := func(sel *pb.ProcessSelector, text string) {
		t.Helper()
		if _, err := h.json.SendInput(testContext(t), connect.NewRequest(&pb.SendInputRequest{
			Process: sel,
			Input:   &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(text)}},
		})); err != nil {
			t.Fatalf("SendInput: %v", err)
		}
	}
	byTagEv := h.connect(t, h.json, byTag("rec"), nil)
	if got := byTagEv.expectStart(t); got != pid {
		t.Fatalf("Connect by tag: pid %d, want %d", got, pid)
	}
	send(byTag("rec"), "1\n")
	// Wait for "first 1" on the tag stream before attaching by pid, so the
	// two streams' contents are known exactly.
	var first bytes.Buffer
	for !strings.Contains(first.String(), "first 1\n") {
		ev := byTagEv.next(t)
		first.Write(ev.GetData().GetStdout())
	}
	byPidEv := h.connect(t, h.h2, byPid(pid), nil)
	if got := byPidEv.expectStart(t); got != pid {
		t.Fatalf("Connect by pid: pid %d, want %d", got, pid)
	}
	send(byPid(pid), "2\n")
	rt := &result{pid: pid}
	rt.collectRest(t, byTagEv)
	rp := &result{pid: pid}
	rp.collectRest(t, byPidEv)
	if first.String()+rt.stdout.String() != "first 1\nsecond 2\n" || rp.stdout.String() != "second 2\n" {
		t.Errorf("by tag: %q, by pid: %q", first.String()+rt.stdout.String(), rp.stdout.String())
	}
	if rt.end.GetExitCode() != 0 || rp.end.GetExitCode() != 0 {
		t.Errorf("ends: %v %v", rt.end, rp.end)
	}
}

func TestList(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	if err := os.Mkdir(filepath.Join(h.root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := h.start(t, h.h2, &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "sleep", Args: []string{"100"}, Envs: map[string]string{"K": "v"}, Cwd: ptr("d")},
		Tag:     ptr("a"),
	}, nil)
	pidA := a.expectStart(t)
	b := h.start(t, h.h2, &pb.StartRequest{Process: cmd("sleep", "101")}, nil)
	pidB := b.expectStart(t)

	resp, err := h.json.List(testContext(t), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Msg.GetProcesses()
	if len(got) != 2 {
		t.Fatalf("List = %v", got)
	}
	if got[0].GetPid() != pidA || got[0].GetTag() != "a" || got[0].GetConfig().GetCmd() != "sleep" ||
		!slices.Equal(got[0].GetConfig().GetArgs(), []string{"100"}) || got[0].GetConfig().GetEnvs()["K"] != "v" ||
		got[0].GetConfig().GetCwd() != "d" {
		t.Errorf("first = %v", got[0])
	}
	if got[1].GetPid() != pidB || got[1].Tag != nil || got[1].GetConfig().Cwd != nil {
		t.Errorf("second = %v", got[1])
	}

	h.signal(t, byPid(pidA), pb.Signal_SIGNAL_SIGKILL)
	(&result{}).collectRest(t, a)
	resp, err = h.h2.List(testContext(t), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetProcesses(); len(got) != 1 || got[0].GetPid() != pidB {
		t.Errorf("List after the first ended = %v", got)
	}
}

func TestPTY(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	for name, c := range h.clients() {
		t.Run(name, func(t *testing.T) {
			ev := h.start(t, c, &pb.StartRequest{
				Process: cmd("sh", "-c", `stty size; read l; stty size; echo "[$l]"`),
				Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 40}},
			}, nil)
			pid := ev.expectStart(t)
			var seen bytes.Buffer
			for !strings.Contains(seen.String(), "40 100") {
				d := ev.next(t).GetData()
				if d.GetStdout() != nil || d.GetStderr() != nil {
					t.Fatalf("PTY process sent stdout/stderr: %v", d)
				}
				seen.Write(d.GetPty())
			}
			if _, err := c.Update(testContext(t), connect.NewRequest(&pb.UpdateRequest{
				Process: byPid(pid),
				Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 90, Rows: 30}},
			})); err != nil {
				t.Fatalf("Update: %v", err)
			}
			if _, err := c.SendInput(testContext(t), connect.NewRequest(&pb.SendInputRequest{
				Process: byPid(pid),
				Input:   &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("typed\n")}},
			})); err != nil {
				t.Fatalf("SendInput pty: %v", err)
			}
			r := &result{pid: pid}
			r.collectRest(t, ev)
			if r.stdout.Len() != 0 || r.stderr.Len() != 0 {
				t.Errorf("PTY process sent stdout %q, stderr %q", r.stdout.String(), r.stderr.String())
			}
			out := seen.String() + r.pty.String()
			for _, want := range []string{"typed\r\n", "30 90", "[typed]"} {
				if !strings.Contains(out, want) {
					t.Errorf("pty output %q lacks %q", out, want)
				}
			}
		})
	}
}

func TestChunksAtMostMaxChunkSize(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	const total = 8 << 20
	for name, client := range map[string]processconnect.ProcessClient{"binary": h.h2, "json": h.json} {
		r := collect(t, h.start(t, client, &pb.StartRequest{Process: cmd("head", "-c", strconv.Itoa(total), "/dev/zero")}, nil))
		if r.stdout.Len() != total {
			t.Errorf("%s: got %d bytes, want %d", name, r.stdout.Len(), total)
		}
		if r.maxChunk > process.MaxChunkSize {
			t.Errorf("%s: largest data event has %d bytes", name, r.maxChunk)
		}
	}
}

func TestKeepalive(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	header := map[string]string{keepalive.Header: "1"}
	start := h.start(t, h.h2, &pb.StartRequest{Process: cmd("sleep", "100")}, header)
	pid := start.expectStart(t)
	conn := h.connect(t, h.json, byPid(pid), header)
	conn.expectStart(t)
	for name, ev := range map[string]*events{"Start": start, "Connect": conn} {
		if got := ev.next(t); got.GetKeepalive() == nil {
			t.Errorf("%s: event %v, want keepalive", name, got)
		}
	}
	h.signal(t, byPid(pid), pb.Signal_SIGNAL_SIGKILL)
}

func TestLateConnectGetsStartAndEnd(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	for name, c := range h.clients() {
		t.Run(name, func(t *testing.T) {
			first := collect(t, h.start(t, c, &pb.StartRequest{Process: cmd("sh", "-c", "echo gone; exit 7"), Tag: ptr("late-" + name)}, nil))
			for _, sel := range []*pb.ProcessSelector{byPid(first.pid), byTag("late-" + name)} {
				r := collect(t, h.connect(t, c, sel, nil))
				if r.pid != first.pid || r.stdout.Len() != 0 || r.end.GetExitCode() != 7 || r.end.GetStatus() != "exit status 7" {
					t.Errorf("late Connect(%v): pid %d, stdout %q, end %v", sel, r.pid, r.stdout.String(), r.end)
				}
			}
			// Only Connect sees ended processes.
			_, err := c.SendSignal(testContext(t), connect.NewRequest(&pb.SendSignalRequest{Process: byPid(first.pid), Signal: pb.Signal_SIGNAL_SIGKILL}))
			checkError(t, err, connect.CodeNotFound, "process with pid "+strconv.Itoa(int(first.pid))+" not found")
		})
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

func TestRunsAsContextUser(t *testing.T) {
	// Switching users needs root.
	testenv.RequireRoot(t)
	root, err := os.MkdirTemp("", "processrpc-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	nobody := identity.User{Name: "nobody", UID: 65534, GID: 65534, Home: "/nonexistent", Switch: true}
	h := newHarness(t, harnessConfig{root: root, user: &nobody})
	r := collect(t, h.start(t, h.h2, &pb.StartRequest{Process: cmd("sh", "-c", `id -u; id -g; echo "$USER $LOGNAME $HOME"`)}, nil))
	if got := r.stdout.String(); got != "65534\n65534\nnobody nobody /nonexistent\n" {
		t.Errorf("output = %q (stderr %q)", got, r.stderr.String())
	}
}

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

// Many small writes arrive complete and in order, however the stream
// batches them.
func TestOutputIntegrity(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	var want strings.Builder
	for i := 1; i <= 50000; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	for name, c := range h.clients() {
		t.Run(name, func(t *testing.T) {
			r := collect(t, h.start(t, c, &pb.StartRequest{
				Process: cmd("sh", "-c", `i=1; while [ $i -le 50000 ]; do echo $i; i=$((i+1)); done; seq 1 50000 >&2`),
			}, nil))
			if r.stdout.String() != want.String() {
				t.Errorf("stdout differs: %d bytes, want %d", r.stdout.Len(), want.Len())
			}
			if r.stderr.String() != want.String() {
				t.Errorf("stderr differs: %d bytes, want %d", r.stderr.Len(), want.Len())
			}
		})
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

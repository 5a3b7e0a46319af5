//go:build linux

package processrpc

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
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

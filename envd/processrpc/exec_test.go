//go:build linux

package processrpc

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/process"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	pb "github.com/sandbox-mcp/sandbox-mcp/proto/process"
	"github.com/sandbox-mcp/sandbox-mcp/proto/process/processconnect"
)

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

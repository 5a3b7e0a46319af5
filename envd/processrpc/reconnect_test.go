//go:build linux

package processrpc

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/keepalive"
	pb "github.com/sandbox-mcp/sandbox-mcp/proto/process"
)

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

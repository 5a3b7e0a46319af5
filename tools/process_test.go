//go:build linux

package tools

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// startBackground starts a background command and returns its result. The
// start does not wait for output unless args say so (wait_sec).
func (h *harness) startBackground(args map[string]any) execOutput {
	h.t.Helper()
	args["background"] = true
	if _, ok := args["wait_sec"]; !ok {
		args["wait_sec"] = 0
	}
	out := h.execOK(args)
	if out.Process == "" || out.Pid == 0 || out.FullOutput == nil || out.FullOutput.Output == "" || out.Status == "" || out.Output == nil {
		h.t.Fatalf("background start: %+v", out)
	}
	return out
}

// readUntil pages through a process's output (max bytes per page) from
// offset until the text read contains want, checking the page arithmetic.
func (h *harness) readUntil(handle string, offset int64, maxBytes int, want string) (string, processOutputOutput) {
	h.t.Helper()
	var got strings.Builder
	var p processOutputOutput
	for i := 0; i < 1000; i++ {
		p = processOutputOutput{}
		h.ok("process_output", map[string]any{"process": handle, "offset": offset, "max_bytes": maxBytes, "wait_sec": 20}, &p)
		if p.Offset != offset || p.NextOffset-p.Offset != int64(len(p.Output)) || len(p.Output) > maxBytes || p.NextOffset > p.TotalBytes {
			h.t.Fatalf("page arithmetic: offset %d, %+v", offset, p)
		}
		if p.Truncated != (p.NextOffset < p.TotalBytes) {
			h.t.Fatalf("truncated: %+v", p)
		}
		got.WriteString(p.Output)
		offset = p.NextOffset
		if strings.Contains(got.String(), want) || p.EOF {
			break
		}
	}
	if !strings.Contains(got.String(), want) {
		h.t.Fatalf("output %q does not contain %q (last page %+v)", got.String(), want, p)
	}
	return got.String(), p
}

// waitEnd follows a process's output from offset until its end and
// returns the last page.
func (h *harness) waitEnd(handle string, offset int64) processOutputOutput {
	h.t.Helper()
	var p processOutputOutput
	for i := 0; i < 100; i++ {
		p = processOutputOutput{}
		h.ok("process_output", map[string]any{"process": handle, "offset": offset, "wait_sec": 20}, &p)
		if p.EOF {
			return p
		}
		offset = p.NextOffset
	}
	h.t.Fatalf("%s did not end: %+v", handle, p)
	return p
}

func TestBackgroundProcessLifecycle(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	script := `for i in $(seq 1 100); do echo line-$i; done; echo ready >&2
while read l; do echo "got:$l"; [ "$l" = quit ] && exit 7; done; echo never`
	start := h.startBackground(map[string]any{"command": script})
	if !strings.HasPrefix(start.Process, "g1-p") || start.Process != fmt.Sprintf("g1-p%d", start.Pid) ||
		start.FullOutput.Output != ".sandbox-mcp/runs/"+start.RunID+"/output.log" || start.TimeoutSec != 0 {
		t.Fatalf("%+v", start)
	}

	// Read in small pages, offset by offset.
	var want strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	want.WriteString("ready\n")
	got, p := h.readUntil(start.Process, 0, 100, "ready\n")
	if got != want.String() || p.Status != "running" || p.EOF || p.ExitCode != nil || p.RunID != start.RunID {
		t.Fatalf("got %q, last page %+v", got, p)
	}
	offset := p.NextOffset

	// Nothing new yet: an immediate answer with no output.
	var now processOutputOutput
	h.ok("process_output", map[string]any{"process": start.Process, "offset": offset}, &now)
	if now.Output != "" || now.NextOffset != offset || now.Status != "running" || now.Truncated || now.EOF {
		t.Fatalf("%+v", now)
	}

	var in processInputOutput
	h.ok("process_input", map[string]any{"process": start.Process, "data": "hello\n"}, &in)
	if in.Written != 6 || in.Closed {
		t.Fatalf("%+v", in)
	}
	got, p = h.readUntil(start.Process, offset, 1000, "got:hello\n")
	if got != "got:hello\n" {
		t.Fatalf("%q", got)
	}
	offset = p.NextOffset

	h.ok("process_input", map[string]any{"process": start.Process, "data": "quit\n", "close": true}, &in)
	if in.Written != 5 || !in.Closed {
		t.Fatalf("%+v", in)
	}
	// Wait for the end: status, exit code, eof.
	p = h.waitEnd(start.Process, offset)
	if !p.EOF || p.Status != "exited" || valueOf(p.ExitCode) != 7 || p.Truncated {
		t.Fatalf("end: %+v", p)
	}
	// The whole log stays readable after the end.
	var all processOutputOutput
	h.ok("process_output", map[string]any{"process": start.Process, "max_bytes": 1 << 20}, &all)
	if all.Output != want.String()+"got:hello\ngot:quit\n" || !all.EOF || all.TotalBytes != int64(len(all.Output)) {
		t.Fatalf("whole log: %+v", all)
	}
	// By run id too.
	h.ok("process_output", map[string]any{"process": start.RunID, "max_bytes": 1 << 20}, &all)
	if all.Process != start.Process || !all.EOF {
		t.Fatalf("by run id: %+v", all)
	}

	var list processListOutput
	h.ok("process_list", map[string]any{}, &list)
	if len(list.Processes) != 1 {
		t.Fatalf("%+v", list)
	}
	e := list.Processes[0]
	if e.Process != start.Process || e.Pid != start.Pid || e.RunID != start.RunID || e.Command != script ||
		e.Status != "exited" || valueOf(e.ExitCode) != 7 || e.StartedAt == "" || e.EndedAt == "" || e.Log != start.FullOutput.Output {
		t.Fatalf("%+v", e)
	}

	// Signalling an ended process reports its status.
	var sig processSignalOutput
	h.ok("process_signal", map[string]any{"process": start.Process}, &sig)
	if !sig.AlreadyEnded || sig.Status != "exited" || valueOf(sig.ExitCode) != 7 || len(sig.Sent) != 0 {
		t.Fatalf("%+v", sig)
	}
	// Input to an ended process is refused clearly.
	if msg := h.fail("process_input", map[string]any{"process": start.Process, "data": "x"}); !strings.Contains(msg, "has already ended (exit code 7)") {
		t.Fatal(msg)
	}
}

func TestBackgroundArgvEnvCwdStdin(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.execOK(map[string]any{"command": "mkdir sub"})
	start := h.startBackground(map[string]any{
		"argv":  []string{"sh", "-c", `pwd; echo "$V"; cat`},
		"cwd":   "sub",
		"env":   []map[string]string{{"name": "V", "value": "from-env"}},
		"stdin": "from-stdin\n",
	})
	root := h.lease().Sandbox.Workdir
	got, _ := h.readUntil(start.Process, 0, 4096, "from-stdin\n")
	if got != root+"/sub\nfrom-env\nfrom-stdin\n" {
		t.Fatalf("%q", got)
	}
	// stdin stays open after the initial text; closing it ends cat.
	var in processInputOutput
	h.ok("process_input", map[string]any{"process": start.Process, "close": true}, &in)
	if !in.Closed || in.Written != 0 {
		t.Fatalf("%+v", in)
	}
	// Refused: its input was closed (or cat already ended on the EOF).
	if msg := h.fail("process_input", map[string]any{"process": start.Process, "data": "late"}); !strings.Contains(msg, "takes no more input") {
		t.Fatal(msg)
	}
	p := h.waitEnd(start.Process, int64(len(got)))
	if p.Status != "exited" || valueOf(p.ExitCode) != 0 {
		t.Fatalf("%+v", p)
	}
	// A background argv whose program does not exist fails inside the
	// wrapper: exit 127 and the shell's message in the log. Without a wait
	// the start returns a handle; the log tells.
	bad := h.startBackground(map[string]any{"argv": []string{"no-such-program-q"}})
	got, p = h.readUntil(bad.Process, 0, 4096, "no-such-program-q")
	p = h.waitEnd(bad.Process, p.NextOffset)
	if p.Status != "exited" || valueOf(p.ExitCode) != 127 {
		t.Fatalf("%q %+v", got, p)
	}
}

func TestProcessSignal(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{SignalGrace: 300 * time.Millisecond}})

	term := h.startBackground(map[string]any{"command": "sleep 100"})
	var sig processSignalOutput
	h.ok("process_signal", map[string]any{"process": term.Process}, &sig)
	if sig.Status != "killed" || sig.Signal != "terminated" || valueOf(sig.ExitCode) != 143 || sig.EscalatedToKill ||
		strings.Join(sig.Sent, ",") != "TERM" || sig.AlreadyEnded {
		t.Fatalf("TERM: %+v", sig)
	}

	// A process that ignores TERM gets KILL after the grace period.
	stubborn := h.startBackground(map[string]any{"command": "trap '' TERM; echo armed; sleep 100"})
	h.readUntil(stubborn.Process, 0, 4096, "armed")
	sig = processSignalOutput{}
	h.ok("process_signal", map[string]any{"process": stubborn.Process, "signal": "TERM"}, &sig)
	if !sig.EscalatedToKill || strings.Join(sig.Sent, ",") != "TERM,KILL" || sig.Status != "killed" || valueOf(sig.ExitCode) != 137 {
		t.Fatalf("escalation: %+v", sig)
	}

	kill := h.startBackground(map[string]any{"command": "sleep 100"})
	sig = processSignalOutput{}
	h.ok("process_signal", map[string]any{"process": kill.Process, "signal": "KILL"}, &sig)
	if sig.Status != "killed" || valueOf(sig.ExitCode) != 137 || sig.EscalatedToKill || strings.Join(sig.Sent, ",") != "KILL" {
		t.Fatalf("KILL: %+v", sig)
	}
	// Idempotent: again is fine.
	sig = processSignalOutput{}
	h.ok("process_signal", map[string]any{"process": kill.Process, "signal": "KILL"}, &sig)
	if !sig.AlreadyEnded || sig.Status != "killed" {
		t.Fatalf("again: %+v", sig)
	}

	if msg := h.fail("process_signal", map[string]any{"process": kill.Process, "signal": "HUP"}); !strings.Contains(msg, "signal") {
		t.Fatal(msg)
	}
	var list processListOutput
	h.ok("process_list", map[string]any{}, &list)
	if len(list.Processes) != 3 || len(list.Others) != 0 {
		t.Fatalf("%+v", list)
	}
	for _, p := range list.Processes {
		if p.Status != "killed" {
			t.Fatalf("%+v", p)
		}
	}
}

func TestProcessOutputWaits(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	// The process keeps running after its output, so only the output can
	// wake the waiting read (not the process's end).
	start := h.startBackground(map[string]any{"command": "read x; echo after-$x; exec sleep 100"})

	// Calls run in goroutines hand their results back; the test goroutine
	// decodes them.
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	waitCall := func(ctx context.Context, handle string) {
		go func() {
			res, err := h.callErr(ctx, "process_output", map[string]any{"process": handle, "wait_sec": 60}, nil)
			done <- result{res: res, err: err}
		}()
	}
	decoded := func(r result) processOutputOutput {
		t.Helper()
		if r.err != nil || r.res.IsError {
			t.Fatalf("process_output: %v %v", r.err, r.res)
		}
		var out processOutputOutput
		decodeStructured(t, r.res, &out)
		return out
	}

	// A waiting read is woken by the output (a timed-out wait would return
	// nothing).
	waitCall(context.Background(), start.Process)
	h.ok("process_input", map[string]any{"process": start.Process, "data": "go\n"}, nil)
	out := decoded(<-done)
	if !strings.HasPrefix(out.Output, "after-go") || out.Status != "running" || out.EOF {
		t.Fatalf("woken read: %+v", out)
	}
	h.ok("process_signal", map[string]any{"process": start.Process, "signal": "KILL"}, nil)

	// A wait that ends by the deadline returns what there is.
	idle := h.startBackground(map[string]any{"command": "sleep 100"})
	var p processOutputOutput
	h.ok("process_output", map[string]any{"process": idle.Process, "wait_sec": 1}, &p)
	if p.Output != "" || p.Status != "running" || p.EOF || p.TotalBytes != 0 {
		t.Fatalf("%+v", p)
	}

	// A cancelled wait ends the call.
	ctx, cancel := context.WithCancel(context.Background())
	waitCall(ctx, idle.Process)
	cancel()
	select {
	case r := <-done:
		if r.err == nil && !r.res.IsError {
			t.Fatalf("cancelled wait succeeded: %s", resultText(r.res))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled wait did not return")
	}
	h.ok("process_signal", map[string]any{"process": idle.Process, "signal": "KILL"}, nil)

	// A wait ends when the process does, even without output.
	quiet := h.startBackground(map[string]any{"command": "read x"})
	waitCall(context.Background(), quiet.Process)
	h.ok("process_input", map[string]any{"process": quiet.Process, "close": true}, nil)
	out = decoded(<-done)
	// The wait returned on the end (read got EOF: exit status 1).
	if !out.EOF {
		out = h.waitEnd(quiet.Process, 0)
	}
	if out.Status != "exited" || valueOf(out.ExitCode) != 1 || out.Output != "" {
		t.Fatalf("%+v", out)
	}
}

func TestBackgroundTimeout(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{MaxTimeout: 5 * time.Second}})
	start := h.startBackground(map[string]any{"command": "echo up; sleep 100", "timeout_sec": 1})
	if start.TimeoutSec != 1 || start.TimeoutClamped {
		t.Fatalf("%+v", start)
	}
	got, _ := h.readUntil(start.Process, 0, 4096, "up\n")
	p := h.waitEnd(start.Process, int64(len(got)))
	if p.Status != "killed" || !p.TimedOut || valueOf(p.ExitCode) != 137 || got != "up\n" {
		t.Fatalf("%+v", p)
	}
	// Clamped like the foreground.
	clamped := h.startBackground(map[string]any{"command": "true", "timeout_sec": 3600})
	if !clamped.TimeoutClamped || clamped.TimeoutSec != 5 || !hasNotice(clamped.Notices, "timeout_sec 3600 was clamped") {
		t.Fatalf("%+v", clamped)
	}
}

func TestProcessToolsBadInput(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	live := h.startBackground(map[string]any{"command": "sleep 100"})
	cases := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"process_output", map[string]any{}, "process"},
		{"process_output", map[string]any{"process": "42"}, "not a process handle"},
		{"process_output", map[string]any{"process": "g1-p-3"}, "not a process handle"},
		{"process_output", map[string]any{"process": "g1-p999999"}, "no background process g1-p999999"},
		{"process_output", map[string]any{"process": "g1-r999"}, "no background process has run id g1-r999"},
		{"process_output", map[string]any{"process": "g9-p1"}, "no background process g9-p1"},
		{"process_output", map[string]any{"process": live.Process, "offset": -1}, "offset"},
		{"process_output", map[string]any{"process": live.Process, "wait_sec": 61}, "wait_sec"},
		{"process_output", map[string]any{"process": live.Process, "max_bytes": 0}, "max_bytes"},
		{"process_output", map[string]any{"process": live.Process, "max_bytes": 2 << 20}, "max_bytes"},
		{"process_output", map[string]any{"process": live.Process, "extra": 1}, "extra"},
		{"process_input", map[string]any{"process": live.Process}, "nothing to do"},
		{"process_input", map[string]any{"data": "x"}, "process"},
		{"process_input", map[string]any{"process": "g1-p999999", "data": "x"}, "no background process"},
		{"process_signal", map[string]any{"process": live.Process, "signal": "INT"}, "signal"},
		{"process_signal", map[string]any{"process": 5}, "process"},
		{"process_list", map[string]any{"all": true}, "all"},
	}
	for _, tc := range cases {
		t.Run(tc.tool+"/"+fmt.Sprint(tc.args), func(t *testing.T) {
			msg := h.fail(tc.tool, tc.args)
			t.Log(msg)
			if !strings.Contains(msg, tc.want) {
				t.Fatalf("%q does not mention %q", msg, tc.want)
			}
		})
	}
	// A foreground run id is not a process.
	fg := h.execOK(map[string]any{"command": "echo fg"})
	if msg := h.fail("process_output", map[string]any{"process": fg.RunID}); !strings.Contains(msg, "foreground run keeps its logs") {
		t.Fatal(msg)
	}
	// Reading past the end is empty, with a notice.
	var p processOutputOutput
	h.ok("process_output", map[string]any{"process": live.Process, "offset": 1 << 20}, &p)
	if p.Output != "" || p.NextOffset != 1<<20 || !hasNotice(p.Notices, "past the end") {
		t.Fatalf("%+v", p)
	}
}

// process_input to a process that never reads its input does not hang the
// call: it gives up after Config.InputWait and says how much went in.
func TestProcessInputToANonReader(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{InputWait: 300 * time.Millisecond}})
	bg := h.startBackground(map[string]any{"command": "exec sleep 300"})
	text := h.fail("process_input", map[string]any{"process": bg.Process, "data": strings.Repeat("x", 1<<20)})
	if !strings.Contains(text, "not reading its standard input") || !strings.Contains(text, "of 1048576 bytes") {
		t.Fatalf("process_input to a non-reader: %q", text)
	}
	// The process and the server are fine afterwards.
	h.ok("process_signal", map[string]any{"process": bg.Process, "signal": "KILL"}, nil)
}

// A process that ended before the signal reached it, while the registry had
// not seen its end yet, is reported as already ended: no signal counts as
// sent and nothing escalates.
func TestProcessSignalAfterUnreportedEnd(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{SignalGrace: 200 * time.Millisecond}})
	bg := h.startBackground(map[string]any{"command": "exec sleep 100"})
	ref, _ := parseHandle(bg.Process)
	e := h.deps.procs.find(h.ws.Key, ref)
	if e == nil {
		t.Fatal("the background process is not registered")
	}
	// End it behind the tools' back and let its follower see the end.
	h.killBehindTheTools(bg.Pid, e)
	// The registry has not heard of the end: an entry for the same process
	// that no follower reports on.
	unreported := &procEntry{handle: e.handle, gen: e.gen, pid: e.pid, runID: e.runID, command: e.command,
		logAbs: e.logAbs, logRel: e.logRel, runDirAbs: e.runDirAbs, startedAt: e.startedAt, done: make(chan struct{})}
	h.deps.procs.add(h.ws.Key, unreported, nil)

	sig, res := okAs[processSignalOutput](h, "process_signal", map[string]any{"process": bg.Process})
	if len(sig.Sent) != 0 || !sig.AlreadyEnded || sig.EscalatedToKill {
		t.Fatalf("signal to an ended process: %+v", sig)
	}
	mustContain(t, resultText(res), "had already ended when the signal was sent")
}

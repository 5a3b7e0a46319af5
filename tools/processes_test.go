//go:build linux

package tools

import (
	"strings"
	"testing"
)

func TestProcessHandleStaleAfterRecreation(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	start := h.startBackground(map[string]any{"command": "sleep 100"})
	id := h.lease().Sandbox.ID
	if err := h.provider.LoseDaemon(id, false); err != nil {
		t.Fatal(err)
	}
	// The next call meets the loss: a recreation notice, and it did not run.
	msg := h.fail("workspace_exec", map[string]any{"command": "echo hi"})
	if !strings.Contains(msg, "NOTICE: The sandbox was recreated (generation 1 → 2)") || !strings.Contains(msg, "was NOT run") {
		t.Fatal(msg)
	}
	// The old handle now belongs to a previous sandbox.
	for _, tool := range []string{"process_output", "process_input", "process_signal"} {
		args := map[string]any{"process": start.Process, "data": "x"}
		if tool != "process_input" {
			delete(args, "data")
		}
		if msg := h.fail(tool, args); !strings.Contains(msg, start.Process+" belongs to a previous sandbox (generation 1)") {
			t.Fatalf("%s: %s", tool, msg)
		}
	}
	var list processListOutput
	h.ok("process_list", map[string]any{}, &list)
	if len(list.Processes) != 0 {
		t.Fatalf("%+v", list)
	}
	// New handles carry the new generation.
	next := h.startBackground(map[string]any{"command": "true"})
	if !strings.HasPrefix(next.Process, "g2-p") || !strings.HasPrefix(next.RunID, "g2-r") {
		t.Fatalf("%+v", next)
	}
}

func TestProcessLostDuringCall(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	start := h.startBackground(map[string]any{"command": "sleep 100"})
	if err := h.provider.LoseDaemon(h.lease().Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	// process_output is the call that meets the loss.
	msg := h.fail("process_output", map[string]any{"process": start.Process})
	if !strings.Contains(msg, "NOTICE: The sandbox was recreated (generation 1 → 2)") {
		t.Fatal(msg)
	}
	if msg := h.fail("process_output", map[string]any{"process": start.Process}); !strings.Contains(msg, "belongs to a previous sandbox") {
		t.Fatal(msg)
	}
}

// restarted returns a harness over the same sandboxes with a fresh server
// and fresh tool state, as after a server restart.
func (h *harness) restarted() *harness {
	h.t.Helper()
	d, s, c := newToolServer(h.t, h.manager, h.deps.Config, h.ws)
	return &harness{t: h.t, provider: h.provider, manager: h.manager, deps: d, server: s, client: c, ws: h.ws}
}

func TestProcessRecoveredAfterServerRestart(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	live := h.startBackground(map[string]any{"command": `echo first; read x; echo "second-$x"`})
	h.readUntil(live.Process, 0, 4096, "first\n")
	ended := h.startBackground(map[string]any{"command": "echo bye"})
	_, p := h.readUntil(ended.Process, 0, 4096, "bye\n")
	h.waitEnd(ended.Process, p.NextOffset)

	h2 := h.restarted()
	// The running one is found again from its handle and followed.
	var got processOutputOutput
	h2.ok("process_output", map[string]any{"process": live.Process}, &got)
	if got.Status != "running" || got.Output != "first\n" || got.RunID != live.RunID {
		t.Fatalf("%+v", got)
	}
	h2.ok("process_input", map[string]any{"process": live.Process, "data": "x\n", "close": true}, nil)
	out, p2 := h2.readUntil(live.Process, got.NextOffset, 4096, "second-x\n")
	p2 = h2.waitEnd(live.Process, p2.NextOffset)
	if out != "second-x\n" || p2.Status != "exited" || valueOf(p2.ExitCode) != 0 {
		t.Fatalf("%q %+v", out, p2)
	}

	// The one that ended before the restart: its log, status unknown.
	h2.ok("process_output", map[string]any{"process": ended.Process}, &got)
	if got.Status != "unknown" || got.Output != "bye\n" || got.Detail == "" || got.RunID != ended.RunID || !got.EOF {
		t.Fatalf("%+v", got)
	}
	var list processListOutput
	h2.ok("process_list", map[string]any{}, &list)
	if len(list.Processes) != 2 {
		t.Fatalf("%+v", list)
	}

	// A process that was running at the restart and nobody asked about yet
	// shows up in process_list of the restarted server.
	other := h.startBackground(map[string]any{"command": "sleep 100"})
	h3 := h.restarted()
	list = processListOutput{}
	h3.ok("process_list", map[string]any{}, &list)
	if len(list.Processes) != 1 || list.Processes[0].Process != other.Process || list.Processes[0].Status != "running" ||
		list.Processes[0].Command != "sleep 100" || len(list.Others) != 0 {
		t.Fatalf("%+v", list)
	}
	var sig processSignalOutput
	h3.ok("process_signal", map[string]any{"process": other.Process, "signal": "KILL"}, &sig)
	if sig.Status != "killed" {
		t.Fatalf("%+v", sig)
	}

	// The restarted server's run ids do not reuse the old run directories.
	fresh := h3.execOK(map[string]any{"command": "echo new"})
	for _, old := range []string{live.RunID, ended.RunID, other.RunID} {
		if fresh.RunID == old {
			t.Fatalf("run id %s reused", old)
		}
	}
}

func TestParseHandle(t *testing.T) {
	for s, want := range map[string]handleRef{
		"g1-p42":      {gen: 1, pid: 42},
		"g12-r7":      {gen: 12, run: 7},
		"g1-p4294967": {gen: 1, pid: 4294967},
	} {
		got, ok := parseHandle(s)
		if !ok || got != want {
			t.Errorf("%s: %+v %v", s, got, ok)
		}
		if want.pid != 0 && formatProcessHandle(want.gen, want.pid) != s || want.run != 0 && formatRunID(want.gen, want.run) != s {
			t.Errorf("%s does not round-trip", s)
		}
	}
	for _, s := range []string{"", "g", "g1", "g1-", "g1-p", "g0-p1", "g1-p0", "g-1-p2", "g1-p+2", "g1-x3", "G1-p2", "g1-p2 ", "g1-p99999999999", "g1-r1x", "1-p2"} {
		if _, ok := parseHandle(s); ok {
			t.Errorf("%q parsed", s)
		}
	}
}

func TestProcessRegistryBounds(t *testing.T) {
	var r processRegistry
	var first *procEntry
	for pid := uint32(1); pid <= maxEndedProcesses+60; pid++ {
		e := &procEntry{handle: formatProcessHandle(1, pid), gen: 1, pid: pid, runID: formatRunID(1, int64(pid)), done: make(chan struct{})}
		if first == nil {
			first = e
		}
		r.add("k", e, nil)
		if pid%2 == 0 || pid > 100 {
			r.finish("k", e, procEnd{status: statusExited})
		}
	}
	// 50 running (odd pids up to 100) are kept; of the 210 ended, the newest 200.
	if n := len(r.list("k", 1)); n != 50+maxEndedProcesses {
		t.Fatalf("%d entries", n)
	}
	if r.find("k", handleRef{gen: 1, pid: 2}) != nil || r.find("k", handleRef{gen: 1, pid: 1}) != first {
		t.Fatal("wrong entries forgotten")
	}
	if e := r.find("k", handleRef{gen: 1, run: 250}); e == nil || e.pid != 250 {
		t.Fatal("find by run id")
	}
	if r.find("k", handleRef{gen: 2, pid: 1}) != nil || len(r.list("k", 2)) != 0 {
		t.Fatal("another generation sees entries")
	}
	// Ending the session forgets the workspace, running processes included;
	// an end reported afterwards does not bring it back.
	running := r.find("k", handleRef{gen: 1, pid: 1})
	r.drop("k")
	if len(r.spaces) != 0 || len(r.list("k", 1)) != 0 {
		t.Fatal("not dropped")
	}
	r.finish("k", running, procEnd{status: statusKilled})
	if len(r.spaces) != 0 {
		t.Fatal("a late end recreated the workspace")
	}
	if end, ended := running.state(); !ended || end.status != statusKilled {
		t.Fatalf("the dropped entry did not learn its end: %+v", end)
	}
	// A newer generation replaces the old entries.
	r.add("k", &procEntry{gen: 1, pid: 7, done: make(chan struct{})}, nil)
	r.add("k", &procEntry{gen: 2, pid: 8, done: make(chan struct{})}, nil)
	r.add("k", &procEntry{gen: 1, pid: 9, done: make(chan struct{})}, nil)
	if l := r.list("k", 2); len(l) != 1 || l[0].pid != 8 || len(r.list("k", 1)) != 0 {
		t.Fatalf("%+v", l)
	}
}

// Deps.EndSession frees what the tools hold for a workspace: its processes
// and its run counter. A follower that sees its process end afterwards does
// not bring the workspace back, and a later session finds its processes in
// the sandbox (as after a restart) without reusing run ids.
func TestEndSessionForgetsWorkspace(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	bg := h.startBackground(map[string]any{"command": "sleep 100"})
	fg := h.execOK(map[string]any{"command": "echo x"})
	ref, _ := parseHandle(bg.Process)
	e := h.deps.procs.find(h.ws.Key, ref)
	if e == nil {
		t.Fatal("the background process is not registered")
	}
	remembered := func() (spaces int, counted bool) {
		h.deps.procs.mu.Lock()
		spaces = len(h.deps.procs.spaces)
		h.deps.procs.mu.Unlock()
		h.deps.runs.mu.Lock()
		_, counted = h.deps.runs.n[h.ws.Key]
		h.deps.runs.mu.Unlock()
		return spaces, counted
	}
	if spaces, counted := remembered(); spaces != 1 || !counted {
		t.Fatalf("before: %d spaces, counted %v", spaces, counted)
	}
	h.deps.EndSession(h.ws.Key)
	if spaces, counted := remembered(); spaces != 0 || counted {
		t.Fatalf("after EndSession: %d spaces, counted %v", spaces, counted)
	}

	// The process ends after the session did: its follower records the end
	// in the entry only.
	h.killBehindTheTools(bg.Pid, e)
	h.deps.procs.mu.Lock()
	spaces := len(h.deps.procs.spaces)
	h.deps.procs.mu.Unlock()
	if spaces != 0 {
		t.Fatal("the follower's end brought the workspace back")
	}

	// A later session of the same workspace.
	var p processOutputOutput
	h.ok("process_output", map[string]any{"process": bg.Process}, &p)
	if p.Status != "unknown" || !p.EOF {
		t.Fatalf("re-found process: %+v", p)
	}
	next := h.execOK(map[string]any{"command": "echo y"})
	if next.RunID == fg.RunID || next.RunID == bg.RunID {
		t.Fatalf("run id %s reused after EndSession", next.RunID)
	}
}

func TestProcessTagsAndArgs(t *testing.T) {
	tag := newProcessTag(tagBg, "g2-r5")
	if kind, run, ok := parseProcessTag(tag); !ok || kind != tagBg || run != "g2-r5" {
		t.Fatalf("%s: %s %s %v", tag, kind, run, ok)
	}
	for _, bad := range []string{"", "sbx-1234", "smcp:xx:g1-r1:00", "smcp:bg:g1-p1:00", "smcp:bg:g1-r1", "smcp:fg:g1-r1:a:b"} {
		if _, _, ok := parseProcessTag(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	if got := shellQuoteArgs([]string{"ls", "-l", "a b", "it's", "", "x=1,y"}); got != `ls -l 'a b' 'it'\''s' '' x=1,y` {
		t.Fatal(got)
	}
	args := []string{"-c", backgroundScript, "sh", "/w/log", "/w/g1-p", "g1-r1"}
	if got := describeBackgroundArgs(append(args, "bash", "-lc", "sleep 1 && echo hi")); got != "sleep 1 && echo hi" {
		t.Fatal(got)
	}
	if got := describeBackgroundArgs(append(args, "python3", "-m", "http.server")); got != "python3 -m http.server" {
		t.Fatal(got)
	}
	if got := describeBackgroundArgs([]string{"-c", "x"}); got != "" {
		t.Fatal(got)
	}
}

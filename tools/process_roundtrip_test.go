//go:build linux

package tools

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// A background start waits for the first output and returns it; input with
// wait_sec returns the answer it produced; a REPL's prompt arrives as it is.
func TestBackgroundStartAndInputAnswer(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	// A REPL in sh: the prompt has no newline, the answer one line.
	repl := `while printf '>>> '; read l; do [ "$l" = quit ] && exit 0; echo "=$l <ok> & done"; done`
	res := h.call("workspace_exec", map[string]any{"command": repl, "background": true, "wait_sec": 20})
	var start execOutput
	decodeStructured(t, res, &start)
	if res.IsError || start.Status != "running" || derefText(start.Output) != ">>> " || valueOf(start.OutputNext) != 4 || start.ExitCode != nil {
		t.Fatalf("start: %+v %s", start, resultText(res))
	}
	text := resultText(res)
	if !strings.HasSuffix(text, "--- output ---\n>>> ") || !strings.Contains(text, "process_output (offset 4)") {
		t.Fatalf("start text: %q", text)
	}

	var in processInputOutput
	res = h.ok("process_input", map[string]any{"process": start.Process, "data": "1+1\n", "wait_sec": 20}, &in)
	answer := derefText(in.Output)
	// The answer line and the next prompt; read on if the prompt came after
	// the output paused.
	if !strings.HasPrefix(answer, "=1+1 <ok> & done\n") || valueOf(in.Offset) != 4 || in.Status != "running" {
		t.Fatalf("answer: %+v", in)
	}
	if answer != "=1+1 <ok> & done\n>>> " {
		rest, _ := h.readUntil(start.Process, valueOf(in.NextOffset), 4096, ">>> ")
		answer += rest
	}
	if answer != "=1+1 <ok> & done\n>>> " {
		t.Fatalf("answer %q", answer)
	}
	if text := resultText(res); !strings.Contains(text, "wrote 4 bytes to the stdin of "+start.Process) || !strings.Contains(text, "\n=1+1 <ok> & done") {
		t.Fatalf("input text: %q", text)
	}

	// The end of the process ends the wait, with its status.
	res = h.ok("process_input", map[string]any{"process": start.Process, "data": "quit\n", "wait_sec": 20}, &in)
	if in.Status != "exited" || valueOf(in.ExitCode) != 0 || derefText(in.Output) != "" {
		t.Fatalf("quit: %+v", in)
	}
	if text := resultText(res); !strings.Contains(text, "process exited, exit 0") || !strings.Contains(text, "no output within the wait") {
		t.Fatalf("quit text: %q", text)
	}
}

// A background command that ends at once: success with its exit code and
// output, or an error result with its output when it failed.
func TestBackgroundStartThatEndsAtOnce(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	res := h.call("workspace_exec", map[string]any{"command": "pyhton3 -m http.server", "background": true, "wait_sec": 20})
	text := resultText(res)
	if !res.IsError || !strings.Contains(text, "ended right after its start: exited, exit 127") || !strings.Contains(text, "pyhton3") || !strings.Contains(text, "not found") {
		t.Fatalf("isError %v: %s", res.IsError, text)
	}
	// Killed by a signal: an error too.
	if msg := h.fail("workspace_exec", map[string]any{"command": "kill -TERM $$", "background": true, "wait_sec": 20}); !strings.Contains(msg, "killed (terminated), exit 143") {
		t.Fatal(msg)
	}
	// A quick success is a result: status exited, exit 0, the output.
	var ok execOutput
	h.ok("workspace_exec", map[string]any{"command": "echo done", "background": true, "wait_sec": 20}, &ok)
	if ok.Status != "exited" || valueOf(ok.ExitCode) != 0 || derefText(ok.Output) != "done\n" || ok.Process == "" {
		t.Fatalf("%+v", ok)
	}
	// wait_sec needs background.
	if msg := h.fail("workspace_exec", map[string]any{"command": "true", "wait_sec": 1}); !strings.Contains(msg, "wait_sec") {
		t.Fatal(msg)
	}
}

// process_output's wait returns a burst of output once it pauses, not at
// its first byte, and at the end of the process.
func TestProcessOutputWaitsForQuiet(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	start := h.startBackground(map[string]any{"command": `read x; for i in 1 2 3 4 5; do echo "line $i"; done; read y; echo last`})
	h.ok("process_input", map[string]any{"process": start.Process, "data": "go\n"}, &processInputOutput{})
	var p processOutputOutput
	h.ok("process_output", map[string]any{"process": start.Process, "wait_sec": 20}, &p)
	if p.Output != "line 1\nline 2\nline 3\nline 4\nline 5\n" || p.Status != "running" {
		t.Fatalf("%+v", p)
	}
	h.ok("process_input", map[string]any{"process": start.Process, "data": "end\n", "close": true}, &processInputOutput{})
	end := h.waitEnd(start.Process, p.NextOffset)
	if valueOf(end.ExitCode) != 0 || !strings.HasSuffix(end.Output, "last\n") && end.Output != "" {
		t.Fatalf("%+v", end)
	}
}

// A foreground timeout says so, suggests background: true, and kills and
// reports what the command left running outside its process group.
func TestForegroundTimeoutReportsLeftovers(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	res := h.call("workspace_exec", map[string]any{
		"command":     `setsid sleep 301 >/dev/null 2>&1 < /dev/null & echo started; exec sleep 300`,
		"timeout_sec": 1,
	})
	var out execOutput
	decodeStructured(t, res, &out)
	if res.IsError || !out.TimedOut || derefText(out.Stdout) != "started\n" {
		t.Fatalf("%+v", out)
	}
	if !hasNotice(out.Notices, "did not finish within its timeout of 1 s") || !hasNotice(out.Notices, "background: true") {
		t.Fatalf("notices: %q", out.Notices)
	}
	m := regexp.MustCompile(`left 1 process\(es\) running outside its process group .*: (\d+) sleep 301`).FindStringSubmatch(strings.Join(out.Notices, "\n"))
	if m == nil {
		t.Fatalf("no leftover notice: %q", out.Notices)
	}
	// It is gone (or a zombie waiting to be reaped).
	waitFor(t, "the leftover sleep to be killed", func() bool {
		var check execOutput
		h.ok("workspace_exec", map[string]any{"command": `s=$(cut -d' ' -f3 /proc/` + m[1] + `/stat 2>/dev/null); [ -z "$s" ] || [ "$s" = Z ] && echo gone`}, &check)
		return derefText(check.Stdout) == "gone\n"
	})
	// A run that ends in time is not scanned and leaves no notice.
	var quick execOutput
	h.ok("workspace_exec", map[string]any{"command": "true"}, &quick)
	if len(quick.Notices) != 0 {
		t.Fatalf("%q", quick.Notices)
	}
}

// With only the exec toolset, workspace_exec offers no background
// processes: its description, schema and the instructions do not point at
// the process tools, and background: true is refused clearly.
func TestExecWithoutProcessToolset(t *testing.T) {
	cfg := Config{Toolsets: []string{ToolsetExec}, MaxTimeout: 5 * time.Second}
	h := newHarness(t, harnessOptions{config: cfg})
	tools, err := Selected(h.deps)
	if err != nil || len(tools) != 1 {
		t.Fatalf("%v %d", err, len(tools))
	}
	def := tools[0].Def
	// What the model is offered: no background, no tool it does not have.
	for _, text := range []string{def.Description, string(def.RawInputSchema), Instructions(h.deps.Config)} {
		for _, word := range []string{"process_output", "process_input", "process_signal", "background", "read_files", "wait_sec"} {
			if strings.Contains(text, word) {
				t.Errorf("%q mentions %s", text, word)
			}
		}
	}
	// What results may hold: no background-only field.
	for _, word := range []string{"process_output", "process_input", "process_signal", `"process"`, `"output"`} {
		if strings.Contains(string(def.RawOutputSchema), word) {
			t.Errorf("output schema mentions %s", word)
		}
	}
	msg := h.fail("workspace_exec", map[string]any{"command": "true", "background": true})
	if !strings.Contains(msg, "background") || !strings.Contains(msg, "not an argument") {
		t.Fatal(msg)
	}
	var out execOutput
	h.ok("workspace_exec", map[string]any{"command": "true", "timeout_sec": 60}, &out)
	if !hasNotice(out.Notices, "clamped") || hasNotice(out.Notices, "background") {
		t.Fatalf("%q", out.Notices)
	}
}

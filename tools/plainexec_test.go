//go:build linux

package tools

import (
	"slices"
	"strings"
	"testing"
)

func TestPlainWords(t *testing.T) {
	for line, want := range map[string][]string{
		"true":                     {"true"},
		"  ls   -la\tsrc/ ":        {"ls", "-la", "src/"},
		"python3 app.py --port=8":  {"python3", "app.py", "--port=8"},
		"make VAR=1 all":           {"make", "VAR=1", "all"},
		"git log -n 3 origin/main": {"git", "log", "-n", "3", "origin/main"},
	} {
		got, ok := plainWords(line)
		if !ok || !slices.Equal(got, want) {
			t.Errorf("plainWords(%q) = %q, %v; want %q", line, got, ok, want)
		}
	}
	for _, line := range []string{
		"", "   ", "echo hi", "cd src", "export A=1", "pwd", "FOO=1 env", "ls *.go", "cat ~/x", "ls $HOME",
		"a && b", "a | b", "a > f", "a; b", "'ls'", `"ls"`, "ls # note", "test -f x", "[ -f x ]", "ls\nrm x",
		"if true", "time ls", "a\\b", "x(1)", "{ ls; }",
	} {
		if got, ok := plainWords(line); ok {
			t.Errorf("plainWords(%q) = %q: want the shell", line, got)
		}
	}
}

// TestPlainCommandRunsDirectly: a plain command line runs without a shell,
// gets the login environment, and a first word that is no executable falls
// back to the shell, under the same run id, whose message and exit status
// 127 the model reads; shell syntax still goes to the shell.
func TestPlainCommandRunsDirectly(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ok("put_files", map[string]any{"files": []map[string]any{{"path": ".bash_profile", "content": "export SMCP_PLAIN=from-profile\n"}}}, nil)
	// bash exports SHLVL to what it runs (even a lone command it execs in
	// its own place); a direct start passes the sandbox's environment on as
	// it is, and that has no SHLVL.
	exit := func(command string) int {
		t.Helper()
		out := h.execOK(map[string]any{"command": command})
		if out.ExitCode == nil {
			t.Fatalf("%s: no exit code: %+v", command, out)
		}
		return *out.ExitCode
	}
	if direct, viaShell := exit("printenv SHLVL"), exit("printenv SHLVL;"); direct != 1 || viaShell != 0 {
		t.Errorf("printenv SHLVL exits %d for a plain command (want 1: no SHLVL, no shell) and %d through the shell (want 0)", direct, viaShell)
	}
	env := h.execOK(map[string]any{"command": "printenv SMCP_PLAIN"})
	if env.Stdout == nil || *env.Stdout != "from-profile\n" {
		t.Errorf("a plain command's environment lacks the login profile's variable: %v", env.Stdout)
	}
	missing := h.execOK(map[string]any{"command": "no-such-command-here --flag"})
	if missing.ExitCode == nil || *missing.ExitCode != 127 || missing.Stderr == nil || !strings.Contains(*missing.Stderr, "command not found") {
		t.Errorf("a missing command: exit %v, stderr %v; want 127 and the shell's message", missing.ExitCode, missing.Stderr)
	}
	// The failed direct start takes no run id of its own.
	prev, _ := parseHandle(env.RunID)
	if ref, ok := parseHandle(missing.RunID); !ok || ref.run != prev.run+1 {
		t.Errorf("run ids %s then %s: the shell's run after a failed direct start should follow on", env.RunID, missing.RunID)
	}
	shell := h.execOK(map[string]any{"command": "echo $SMCP_PLAIN"})
	if shell.Stdout == nil || *shell.Stdout != "from-profile\n" {
		t.Errorf("shell syntax: %v", shell.Stdout)
	}
}

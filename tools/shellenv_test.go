//go:build linux

package tools

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

func TestMergePath(t *testing.T) {
	const sbox = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	cases := []struct {
		name, base, login, want string
	}{
		{"same", sbox, sbox, sbox},
		{"no login PATH", sbox, "", sbox},
		{"subset: sbin dropped, nothing added", sbox, "/usr/local/bin:/usr/bin:/bin", sbox},
		{"prepended", sbox, "/h/.local/bin:" + sbox, "/h/.local/bin:" + sbox},
		{"prepended in order", sbox, "/opt/conda/bin:/h/.local/bin:/usr/bin", "/opt/conda/bin:/h/.local/bin:" + sbox},
		{"appended", sbox, sbox + ":/usr/local/go/bin", sbox + ":/usr/local/go/bin"},
		// The host's /etc/profile for a non-root user, then ~/.profile.
		{"debian profile", sbox, "/h/.local/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games",
			"/h/.local/bin:" + sbox + ":/usr/local/games:/usr/games"},
		{"between", "/a:/b:/c", "/a:/x:/c", "/a:/b:/x:/c"},
		{"between, reordered", "/a:/b:/c", "/c:/x:/a", "/x:/a:/b:/c"},
		{"duplicates added once", sbox, "/x:/x:/bin:/x", "/x:" + sbox},
		{"base duplicates kept", "/a:/a:/b", "/y:/a", "/y:/a:/a:/b"},
		{"empty entries ignored", sbox, "::/x::" + sbox, "/x:" + sbox},
		{"empty base", "", "/a:/b", "/a:/b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergePath(tc.base, tc.login); got != tc.want {
				t.Errorf("mergePath(%q, %q) = %q, want %q", tc.base, tc.login, got, tc.want)
			}
		})
	}
}

func TestLoginEnvDelta(t *testing.T) {
	base := map[string]string{"PATH": "/usr/sbin:/usr/bin", "HOME": "/w", "LANG": "C.UTF-8", "SHLVL": "1", "PWD": "/w", "_": "/usr/bin/env", "GONE": "x"}
	cases := []struct {
		name  string
		login map[string]string
		want  map[string]string
	}{
		{"unchanged", maps.Clone(base), nil},
		{"shell's own ignored", map[string]string{"PATH": "/usr/sbin:/usr/bin", "HOME": "/w", "LANG": "C.UTF-8", "SHLVL": "2", "PWD": "/x", "OLDPWD": "/w", "_": "/bin/env"}, nil},
		{"set and changed", map[string]string{"PATH": "/usr/bin", "HOME": "/w", "LANG": "en_US.UTF-8", "CONDA_PREFIX": "/opt/conda"},
			map[string]string{"LANG": "en_US.UTF-8", "CONDA_PREFIX": "/opt/conda"}},
		{"PATH merged", map[string]string{"PATH": "/h/bin:/usr/bin", "HOME": "/w", "LANG": "C.UTF-8"},
			map[string]string{"PATH": "/h/bin:/usr/sbin:/usr/bin"}},
		{"set to empty", map[string]string{"PATH": "/usr/sbin:/usr/bin", "EMPTY": ""}, map[string]string{"EMPTY": ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := loginEnvDelta(base, tc.login); !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSplitCapture(t *testing.T) {
	out := "A=1\x00PATH=/bin\x00" + baseMarker + "\x00" +
		"Welcome, noise from the profile\n" + // a profile that prints
		"\x00" + loginMarker + "\x00" + "A=2\x00MULTI=line one\nline=two\x00PATH=/x:/bin\x00"
	base, login, ok := splitCapture([]byte(out))
	if !ok {
		t.Fatal("markers not found")
	}
	if !maps.Equal(base, map[string]string{"A": "1", "PATH": "/bin"}) {
		t.Errorf("base = %v", base)
	}
	if !maps.Equal(login, map[string]string{"A": "2", "MULTI": "line one\nline=two", "PATH": "/x:/bin"}) {
		t.Errorf("login = %v", login)
	}
	for _, bad := range []string{"", "A=1\x00", "A=1\x00" + baseMarker + "\x00B=2\x00"} {
		if _, _, ok := splitCapture([]byte(bad)); ok {
			t.Errorf("splitCapture(%q) ok", bad)
		}
	}
}

func TestShellProfileCommand(t *testing.T) {
	user := map[string]string{"MINE": "u", "SHARED": "user"}
	prof := shellProfile{shell: "/bin/bash", env: map[string]string{"SHARED": "profile", "PATH": "/h/bin:/bin"}}
	cases := []struct {
		name     string
		p        shellProfile
		login    bool
		user     map[string]string
		wantArgs []string
		wantEnv  map[string]string
	}{
		{"captured", prof, false, user, []string{"-c", "x"}, map[string]string{"MINE": "u", "SHARED": "user", "PATH": "/h/bin:/bin"}},
		{"captured, no user env", prof, false, nil, []string{"-c", "x"}, prof.env},
		{"login asked", prof, true, user, []string{"-lc", "x"}, user},
		{"capture failed", shellProfile{shell: "/bin/bash", loginOnly: true}, false, user, []string{"-lc", "x"}, user},
		{"sh", shellProfile{shell: "/bin/sh"}, false, user, []string{"-c", "x"}, user},
		{"sh, login asked", shellProfile{shell: "/bin/sh"}, true, nil, []string{"-lc", "x"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sh, args, env := tc.p.command("x", tc.login, tc.user)
			if sh != tc.p.shell || !slices.Equal(args, tc.wantArgs) || !maps.Equal(env, tc.wantEnv) {
				t.Errorf("got %s %q %v, want %q %v", sh, args, env, tc.wantArgs, tc.wantEnv)
			}
		})
	}
	if prof.env["SHARED"] != "profile" {
		t.Error("command changed the profile's env")
	}
}

// testProfile is a ~/.bash_profile (HOME is the workspace root) that
// exports a variable, adds a directory in front of PATH and one at its end,
// prints to stdout, and counts its runs in profile-runs.
const testProfile = `echo "profile noise"
echo run >> "$HOME/profile-runs"
export SMCP_PROFILE_VAR=%s
PATH="$HOME/bin:$PATH:/opt/smcp-tail"
`

func putProfile(h *harness, value string) {
	h.t.Helper()
	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": ".bash_profile", "content": strings.Replace(testProfile, "%s", value, 1)},
	}}, nil)
}

// profileRuns is how many times the test profile ran.
func profileRuns(h *harness) int {
	h.t.Helper()
	b, err := h.sandboxFile("profile-runs")
	if err != nil {
		h.t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

func TestWorkspaceExecLoginEnvironment(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	putProfile(h, "first")
	// The sandbox's own PATH, as envd gives it to any process.
	basePath := strings.TrimSpace(valueOf(h.execOK(map[string]any{"argv": []string{"printenv", "PATH"}}).Stdout))
	home := h.lease().Sandbox.Workdir

	// Concurrent first commands share one capture: the profile runs once.
	const calls = 8
	probe := `printf '%s\n' "$PATH" "$SMCP_PROFILE_VAR"`
	outs := make([]execOutput, calls)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := h.call("workspace_exec", map[string]any{"command": probe})
			if res.IsError {
				t.Errorf("call %d: %s", i, resultText(res))
				return
			}
			decodeStructured(t, res, &outs[i])
		}()
	}
	wg.Wait()
	wantPath := home + "/bin:" + basePath + ":/opt/smcp-tail"
	for i, out := range outs {
		if got := valueOf(out.Stdout); got != wantPath+"\nfirst\n" {
			t.Errorf("call %d: stdout %q, want PATH %q and the profile's variable", i, got, wantPath)
		}
	}
	if n := profileRuns(h); n != 1 {
		t.Errorf("the profile ran %d times for %d concurrent first calls, want 1", n, calls)
	}

	// The model's env wins over the profile's.
	out := h.execOK(map[string]any{"command": `printf %s "$SMCP_PROFILE_VAR"`, "env": []map[string]string{{"name": "SMCP_PROFILE_VAR", "value": "mine"}}})
	if got := valueOf(out.Stdout); got != "mine" {
		t.Errorf("env over the profile: %q", got)
	}

	// A background start gets the same environment.
	h.execOK(map[string]any{"command": probe + " > bg.txt", "background": true})
	var bg []byte
	waitFor(t, "the background command's file", func() bool {
		b, err := h.sandboxFile("bg.txt")
		bg = b
		return err == nil && strings.Count(string(b), "\n") == 2
	})
	if string(bg) != wantPath+"\nfirst\n" {
		t.Errorf("background: %q", bg)
	}
	if n := profileRuns(h); n != 1 {
		t.Errorf("the profile ran %d times, want 1", n)
	}

	// login: true is a login shell, which reads the profile itself (its
	// output included).
	out = h.execOK(map[string]any{"command": `shopt -q login_shell && echo login; printf '%s\n' "$SMCP_PROFILE_VAR"`, "login": true})
	if got := valueOf(out.Stdout); got != "profile noise\nlogin\nfirst\n" {
		t.Errorf("login: %q", got)
	}
	if n := profileRuns(h); n != 2 {
		t.Errorf("the profile ran %d times after a login call, want 2", n)
	}

	// After a reset the new sandbox gets its own capture.
	h.ok("workspace_reset", map[string]any{"confirm": true}, nil)
	putProfile(h, "second")
	wantPath = h.lease().Sandbox.Workdir + "/bin:" + basePath + ":/opt/smcp-tail"
	out = h.execOK(map[string]any{"command": probe})
	if got := valueOf(out.Stdout); got != wantPath+"\nsecond\n" {
		t.Errorf("after reset: %q", got)
	}
	if n := profileRuns(h); n != 1 {
		t.Errorf("the new sandbox's profile ran %d times, want 1", n)
	}
}

// A profile that makes the capture fail leaves the sandbox on bash -lc,
// logged once.
func TestWorkspaceExecCaptureFailsFallsBackToLogin(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	var logs bytes.Buffer
	h.deps.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": ".bash_profile", "content": "[ -e \"$HOME/fixed\" ] || exit 7\nexport SMCP_PROFILE_VAR=fixed\n"},
	}}, nil)
	out := h.execOK(map[string]any{"command": "echo ran"})
	if valueOf(out.ExitCode) != 7 || valueOf(out.Stdout) != "" {
		t.Fatalf("with a profile that exits, as bash -lc does: %+v", out)
	}
	h.ok("put_files", map[string]any{"files": []map[string]any{{"path": "fixed", "content": ""}}}, nil)
	out = h.execOK(map[string]any{"command": `shopt -q login_shell && echo login; echo "$SMCP_PROFILE_VAR"`})
	if got := valueOf(out.Stdout); got != "login\nfixed\n" {
		t.Errorf("after the capture failed: %q, want a login shell", got)
	}
	if n := strings.Count(logs.String(), "could not capture the sandbox's login environment"); n != 1 || !strings.Contains(logs.String(), "exit status 7") {
		t.Errorf("logged %d times, want once with the exit status:\n%s", n, logs.String())
	}
}

// A first call cancelled during the capture caches nothing: a call that
// waited on it captures again and gets the environment.
func TestWorkspaceExecCaptureCancelledIsRetried(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ok("put_files", map[string]any{"files": []map[string]any{{"path": ".bash_profile", "content": `echo > "$HOME/capturing"
[ -e "$HOME/open" ] || read -r _ < "$HOME/gate"
export SMCP_PROFILE_VAR=after
`}}}, nil)
	h.execOK(map[string]any{"argv": []string{"mkfifo", "gate"}})

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	go func() {
		defer close(first)
		_, _ = h.callErr(ctx, "workspace_exec", map[string]any{"command": "true"}, nil)
	}()
	waitFor(t, "the capture to start", func() bool { return h.sbExists("capturing") })
	second := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := h.callErr(context.Background(), "workspace_exec", map[string]any{"command": `printf %s "$SMCP_PROFILE_VAR"`}, nil)
		if err != nil {
			t.Errorf("second call: %v", err)
		}
		second <- res
	}()
	cancel()
	<-first
	h.ok("put_files", map[string]any{"files": []map[string]any{{"path": "open", "content": ""}}}, nil)
	// Let go of any capture already waiting on the gate.
	h.execOK(map[string]any{"argv": []string{"sh", "-c", "echo > gate"}, "background": true})
	res := <-second
	if res == nil {
		return
	}
	var out execOutput
	decodeStructured(t, res, &out)
	if res.IsError || valueOf(out.Stdout) != "after" {
		t.Errorf("the call after a cancelled capture: %s", resultText(res))
	}
}

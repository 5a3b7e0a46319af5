//go:build linux

package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
)

// bwrapSandboxPath is the PATH a bwrap sandbox gives its processes
// (sandboxPath in manage/local/bwrap.go).
const bwrapSandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// TestExecCommandKeepsSandboxPath runs command strings in a real bwrap
// sandbox, whose login profile is the host's /etc/profile (which sets PATH
// outright, without the sbin directories for a non-root user) followed by a
// ~/.bash_profile in the workspace: the command sees the sandbox's PATH
// with the profile's additions, and the profile's variables.
func TestExecCommandKeepsSandboxPath(t *testing.T) {
	n := newNewcomer(t)
	call := func(tool, args string) map[string]any {
		t.Helper()
		out, errs, code := n.run("./sandbox-mcp call --result-format json --isolation bwrap --workspace path "+tool+" '"+args+"'", nil)
		if code != 0 {
			if strings.Contains(errs, "bwrap") || strings.Contains(errs, "bubblewrap") {
				testenv.Missing(t, "a working bwrap sandbox (%s): install bubblewrap; sandbox-mcp doctor names the fix", errs)
			}
			t.Fatalf("call %s %s: exit %d\n%s\n%s", tool, args, code, out, errs)
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(lastLine(out)), &res); err != nil {
			t.Fatalf("call %s: %v in %q", tool, err, out)
		}
		return res
	}
	stdout := func(res map[string]any) []string {
		s, _ := res["stdout"].(string)
		return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	}
	if info := call("workspace_info", `{}`); info["isolation"] != "bwrap" {
		testenv.Missing(t, "a bwrap sandbox (this one is isolated by %v): install bubblewrap", info["isolation"])
	}
	call("put_files", `{"files": [{"path": ".bash_profile", "content": "export SMCP_PROFILE_VAR=from-profile\nPATH=\"$HOME/.local/bin:$PATH\"\n"}]}`)

	if got := stdout(call("workspace_exec", `{"argv": ["printenv", "PATH"]}`)); !slices.Equal(got, []string{bwrapSandboxPath}) {
		t.Fatalf("the sandbox's own PATH is %q, want %q", got, bwrapSandboxPath)
	}
	probe := `{"command": "printf \"%s\\n\" \"$PATH\" \"$SMCP_PROFILE_VAR\"" LOGIN}`
	login := stdout(call("workspace_exec", strings.Replace(probe, "LOGIN", `, "login": true`, 1)))
	got := stdout(call("workspace_exec", strings.Replace(probe, "LOGIN", "", 1)))
	if len(got) != 2 || len(login) != 2 {
		t.Fatalf("command: %q, login: %q", got, login)
	}
	if got[1] != "from-profile" || login[1] != "from-profile" {
		t.Errorf("the profile's variable: %q (login shell: %q)", got[1], login[1])
	}
	// In front what ~/.bash_profile prepended, then the sandbox's PATH
	// whole, then only what the login PATH has besides (the host's
	// /etc/profile adds the games directories).
	want := "/workspace/.local/bin:" + bwrapSandboxPath
	rest, ok := strings.CutPrefix(got[0], want)
	if !ok {
		t.Fatalf("command's PATH %q does not start with %q (the login shell's is %q)", got[0], want, login[0])
	}
	loginDirs := strings.Split(login[0], ":")
	for _, d := range strings.Split(strings.TrimPrefix(rest, ":"), ":") {
		if rest != "" && (!slices.Contains(loginDirs, d) || slices.Contains(strings.Split(bwrapSandboxPath, ":"), d)) {
			t.Errorf("command's PATH %q has %q, which is not an addition of the login PATH %q", got[0], d, login[0])
		}
	}
}

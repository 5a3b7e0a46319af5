//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// putFilesArgs is a put_files call of count files d/fNN.txt (content
// "new NN") and keep.txt (content "new keep").
func putFilesArgs(t *testing.T, count int) string {
	t.Helper()
	type file struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	files := []file{{Path: "keep.txt", Content: "new keep"}}
	for i := range count {
		files = append(files, file{Path: fmt.Sprintf("d/f%02d.txt", i), Content: fmt.Sprintf("new %02d", i)})
	}
	raw, err := json.Marshal(map[string][]file{"files": files})
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// workspaceState describes the workspace in one line: how many files d/
// holds and how many are new, what keep.txt says, and how many temporaries
// and journals are left anywhere.
const workspaceState = `./sandbox-mcp call --workspace w workspace_exec '{"command": "echo files=$(ls d 2>/dev/null | wc -l) new=$(grep -l new d/* 2>/dev/null | wc -l) keep=$(cat keep.txt) temps=$(find . -name \"*sandbox-mcp-tmp*\" | wc -l) journals=$(find .sandbox-mcp -name \"*.journal*\" 2>/dev/null | wc -l) dir=$(test -d d && echo yes || echo no)"}'`

// put_files was not all-or-nothing across a crash: a kill -9 of the server
// during the rename phase left some files new and the rest as hidden
// temporaries, and during the upload phase the temporaries stayed for good.
// Now a journal in the sandbox records the batch; the next call (a new
// server process) rolls it forward when the renames had begun and back
// when they had not, removes every temporary, and says so once.
func TestPutFilesCrashIsAllOrNothing(t *testing.T) {
	const count = 40
	for _, tc := range []struct {
		crash, want, notice string
	}{
		{"rename:15", fmt.Sprintf("files=%d new=%d keep=new keep temps=0 journals=0 dir=yes", count, count), "it was completed: all 41 file(s) are written"},
		{"upload:15", "files=0 new=0 keep=old temps=0 journals=0 dir=no", "it was undone, none of its files were written"},
	} {
		t.Run(tc.crash, func(t *testing.T) {
			n := newNewcomer(t)
			n.mustRun(`./sandbox-mcp call --workspace w put_files '{"files": [{"path": "keep.txt", "content": "old"}]}'`)
			out, errs, code := n.run("SANDBOX_MCP_TEST_CRASH_BATCH="+tc.crash+" ./sandbox-mcp call --workspace w put_files '"+putFilesArgs(t, count)+"'", nil)
			if code == 0 {
				t.Fatalf("the crash point did not crash the server:\n%s\n%s", out, errs)
			}
			// The state the crash left: half done.
			first := n.mustRun(`./sandbox-mcp call --workspace w read_files '{"paths": ["keep.txt"]}'`)
			if strings.Count(first, "NOTICE: An earlier put_files call") != 1 || !strings.Contains(first, tc.notice) {
				t.Errorf("first call after the crash: want the repair notice %q once:\n%s", tc.notice, first)
			}
			got := n.mustRun(workspaceState)
			if !strings.Contains(got, tc.want) {
				t.Errorf("workspace after the repair: %s\nwant %s", got, tc.want)
			}
			if strings.Contains(got, "An earlier") {
				t.Errorf("the repair notice came twice: %s", got)
			}
		})
	}
}

// A journal is written in the workspace, which the sandbox can write too: a
// journal the tenant forged must not make the server rename or remove
// anything outside the workspace, through .., an absolute path or a
// symlink, nor any file that is not one of its own temporaries.
func TestPutFilesForgedJournalIsRefused(t *testing.T) {
	n := newNewcomer(t)
	forge := func(name string, j map[string]any) string {
		raw, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("printf '%%s' '%s' > .sandbox-mcp/batch-%s.journal; ", raw, name)
	}
	victim := ".victim" + "." + "sandbox-mcp-tmp-" + "aaaaaaaaaaaa"
	script := "mkdir -p .sandbox-mcp /tmp/out && echo precious > /tmp/out/" + victim + " && echo mine > plain.txt && ln -s /tmp/out lnk; " +
		forge("dotdot", map[string]any{"phase": "upload", "files": []map[string]string{{"dest": "../tmp/out/victim", "temp": "../tmp/out/" + victim}}}) +
		forge("abs", map[string]any{"phase": "upload", "files": []map[string]string{{"dest": "/tmp/out/victim", "temp": "/tmp/out/" + victim}}}) +
		forge("link", map[string]any{"phase": "upload", "files": []map[string]string{{"dest": "lnk/victim", "temp": "lnk/" + victim}}}) +
		forge("notemp", map[string]any{"phase": "upload", "files": []map[string]string{{"dest": "x", "temp": "plain.txt"}}}) +
		forge("rename", map[string]any{"phase": "rename", "files": []map[string]string{{"dest": "../tmp/out/moved", "temp": "plain.txt"}}}) +
		"echo forged"
	args, _ := json.Marshal(map[string]string{"command": script})
	if out, errs, code := n.run("./sandbox-mcp call --workspace w workspace_exec -", strings.NewReader(string(args))); code != 0 || !strings.Contains(out, "forged") {
		t.Fatalf("forging the journals: exit %d\n%s\n%s", code, out, errs)
	}
	out, errs, code := n.run(`./sandbox-mcp call --workspace w workspace_exec '{"command": "ls -A /tmp/out; cat plain.txt; ls .sandbox-mcp | grep -c journal"}'`, nil)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, victim) || !strings.Contains(out, "mine") || strings.Contains(out, "moved") {
		t.Errorf("the forged journals changed files:\n%s", out)
	}
	if strings.Contains(out, "NOTICE: An earlier") {
		t.Errorf("a forged journal produced a notice:\n%s", out)
	}
	if strings.Count(errs, "ignored a write journal") != 5 {
		t.Errorf("stderr: want the five forged journals logged as ignored:\n%s", errs)
	}
	if !strings.Contains(out, `mine\n0\n`) && !strings.Contains(out, "mine\n0\n") {
		t.Errorf("forged journals were not removed:\n%s", out)
	}
}

//go:build linux

package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// hostTreeFixture builds a stage root on the host:
//
//	data/a.txt, data/sub/b.sh (0755), data/empty/, data/pipe (fifo),
//	data/alias.txt -> a.txt, data/passwd -> /etc/passwd,
//	data/sublink -> sub, data/escape -> ../secret, secret/key
func hostTreeFixture(t *testing.T) (data, secret string) {
	t.Helper()
	base := t.TempDir()
	data, secret = filepath.Join(base, "data"), filepath.Join(base, "secret")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(data, "sub"), 0o755))
	must(os.MkdirAll(filepath.Join(data, "empty"), 0o755))
	must(os.MkdirAll(secret, 0o755))
	must(os.WriteFile(filepath.Join(data, "a.txt"), []byte("A"), 0o644))
	must(os.WriteFile(filepath.Join(data, "sub", "b.sh"), []byte("echo b\n"), 0o755))
	must(os.WriteFile(filepath.Join(secret, "key"), []byte("s3cret"), 0o644))
	must(syscall.Mkfifo(filepath.Join(data, "pipe"), 0o644))
	must(os.Symlink("a.txt", filepath.Join(data, "alias.txt")))
	must(os.Symlink("/etc/passwd", filepath.Join(data, "passwd")))
	must(os.Symlink("sub", filepath.Join(data, "sublink")))
	must(os.Symlink("../secret", filepath.Join(data, "escape")))
	return data, secret
}

func TestStageInputsFromHost(t *testing.T) {
	data, _ := hostTreeFixture(t)
	h := newHarness(t, harnessOptions{config: Config{StageRoots: map[string]string{"data": data}}})

	out, res := okAs[stageInputsOutput](h, "stage_inputs", map[string]any{"inputs": []map[string]any{{"from": "host://data"}}})
	if len(out.Staged) != 1 || out.Staged[0] != (stagedInput{From: "host://data", To: "data", Mode: "copy", Files: 3, Bytes: 1 + 7 + 1}) {
		t.Errorf("staged = %+v", out.Staged)
	}
	if got := string(h.sbRead("data/a.txt")); got != "A" {
		t.Errorf("data/a.txt = %q", got)
	}
	if got := string(h.sbRead("data/alias.txt")); got != "A" {
		t.Errorf("data/alias.txt (a symlink inside the root, staged as a file) = %q", got)
	}
	if e, err := h.sbStat("data/sub/b.sh"); err != nil || e.Mode != 0o755 {
		t.Errorf("data/sub/b.sh = %+v, %v; want mode 0755 kept", e, err)
	}
	if e, err := h.sbStat("data/empty"); err != nil || e.Type != envdclient.TypeDir {
		t.Errorf("empty directory not staged: %+v %v", e, err)
	}
	for _, p := range []string{"data/pipe", "data/passwd", "data/sublink", "data/escape"} {
		if h.sbExists(p) {
			t.Errorf("%s was staged", p)
		}
	}
	var skipped []string
	for _, s := range out.Skipped {
		skipped = append(skipped, s.Path)
	}
	slices.Sort(skipped)
	if !slices.Equal(skipped, []string{"escape", "passwd", "pipe", "sublink"}) {
		t.Errorf("skipped = %+v", out.Skipped)
	}
	mustContain(t, resultText(res), "NOTICE:", "skipped")

	// Again: idempotent. A file into an existing directory goes inside it.
	h.ok("stage_inputs", map[string]any{"inputs": []map[string]any{{"from": "host://data"}}}, nil)
	h.sbRun("mkdir", "tools")
	out, _ = okAs[stageInputsOutput](h, "stage_inputs", map[string]any{"inputs": []map[string]any{
		{"from": "host://data/sub/b.sh", "to": "tools"},
		{"from": "host://data/a.txt", "to": "in/renamed.txt"},
	}})
	if out.Staged[0].To != "tools/b.sh" || out.Staged[1].To != "in/renamed.txt" || out.Staged[1].Files != 1 {
		t.Errorf("staged = %+v", out.Staged)
	}
	if got := string(h.sbRead("in/renamed.txt")); got != "A" {
		t.Errorf("in/renamed.txt = %q", got)
	}
}

func TestStageInputsHostRefusals(t *testing.T) {
	data, secret := hostTreeFixture(t)
	h := newHarness(t, harnessOptions{config: Config{StageRoots: map[string]string{"data": data}}})
	stage := func(in map[string]any) string {
		t.Helper()
		return h.fail("stage_inputs", map[string]any{"inputs": []map[string]any{in}})
	}
	mustContain(t, stage(map[string]any{"from": "host://data/escape/key"}), "host://data/escape/key", "outside the stage root \"data\"", "refused")
	mustContain(t, stage(map[string]any{"from": "host://data/passwd"}), "outside the stage root")
	mustContain(t, stage(map[string]any{"from": "host://data/../secret/key"}), "leaves the stage root")
	mustContain(t, stage(map[string]any{"from": "host://data//etc/passwd"}), "leaves the stage root")
	mustContain(t, stage(map[string]any{"from": "host://etc/passwd"}), `"etc" is not an allowed stage root`, "allowed: data")
	mustContain(t, stage(map[string]any{"from": "host://data/nope"}), "Not found", "host://data/nope does not exist")
	mustContain(t, stage(map[string]any{"from": "host://data/a.txt", "mode": "link"}), "link works only for workspace://")
	mustContain(t, stage(map[string]any{"from": "file:///etc/passwd"}), "not a source")
	mustContain(t, stage(map[string]any{"from": "host://data/a.txt", "to": "../out"}), "leaves the workspace")
	for _, text := range []string{
		stage(map[string]any{"from": "host://data/escape/key"}),
		stage(map[string]any{"from": "host://data/passwd"}),
	} {
		if strings.Contains(text, secret) || strings.Contains(text, data) {
			t.Errorf("refusal reveals a host path: %s", text)
		}
	}
	h.sbRun("ln", "-s", "/etc", "etclink")
	mustContain(t, stage(map[string]any{"from": "host://data/a.txt", "to": "etclink/x"}), "outside the workspace")
	if h.sbExists("key") || h.sbExists("passwd") {
		t.Error("a refused input was staged")
	}

	// Without stage roots, host:// is unavailable and says why.
	h2 := newHarness(t, harnessOptions{})
	mustContain(t, h2.fail("stage_inputs", map[string]any{"inputs": []map[string]any{{"from": "host://data/a.txt"}}}),
		"not allowed any host directory", "--stage-root")
}

func TestStageInputsWorkspace(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": "src/a.txt", "content": "A"},
		{"path": "src/deep/b.txt", "content": "BB"},
		{"path": "one.txt", "content": "1", "mode": "0700"},
	}}, nil)
	out, _ := okAs[stageInputsOutput](h, "stage_inputs", map[string]any{"inputs": []map[string]any{
		{"from": "workspace://src", "to": "copy"},
		{"from": "workspace://one.txt", "to": "two.txt"},
		{"from": "workspace://src", "to": "links/src", "mode": "link"},
	}})
	want := []stagedInput{
		{From: "workspace://src", To: "copy", Mode: "copy", Files: 2, Bytes: 3},
		{From: "workspace://one.txt", To: "two.txt", Mode: "copy", Files: 1, Bytes: 1},
		{From: "workspace://src", To: "links/src", Mode: "link", Files: 1},
	}
	if !slices.Equal(out.Staged, want) {
		t.Errorf("staged = %+v\nwant %+v", out.Staged, want)
	}
	if got := string(h.sbRead("copy/deep/b.txt")); got != "BB" {
		t.Errorf("copy/deep/b.txt = %q", got)
	}
	if e, _ := h.sbStat("two.txt"); e.Mode != 0o700 {
		t.Errorf("two.txt mode = %o, want 0700 (cp -a)", e.Mode)
	}
	if e, err := h.sbStat("links/src"); err != nil || e.Type != envdclient.TypeSymlink {
		t.Fatalf("links/src = %+v, %v", e, err)
	}
	if f := readOne(h, map[string]any{"paths": []string{"links/src/deep/b.txt"}}); f.Content != "BB" {
		t.Errorf("read through the link = %+v", f)
	}
	// Copying again merges (idempotent); linking again replaces the link.
	h.ok("stage_inputs", map[string]any{"inputs": []map[string]any{
		{"from": "workspace://src", "to": "copy"},
		{"from": "workspace://src", "to": "links/src", "mode": "link"},
	}}, nil)
	if got := string(h.sbRead("copy/a.txt")); got != "A" || h.sbExists("copy/src") {
		t.Errorf("second copy did not merge: copy/a.txt %q, copy/src exists %v", got, h.sbExists("copy/src"))
	}

	stage := func(in map[string]any) string {
		t.Helper()
		return h.fail("stage_inputs", map[string]any{"inputs": []map[string]any{in}})
	}
	mustContain(t, stage(map[string]any{"from": "workspace://one.txt"}), "is the source itself")
	mustContain(t, stage(map[string]any{"from": "workspace://src", "to": "src/inner"}), "cannot be copied into itself")
	mustContain(t, stage(map[string]any{"from": "workspace://missing"}), "workspace://missing does not exist")
	mustContain(t, stage(map[string]any{"from": "workspace://../x", "to": "x"}), "leaves the workspace")
	mustContain(t, stage(map[string]any{"from": "workspace://src", "to": "copy", "mode": "link"}), "existing directory")
	mustContain(t, stage(map[string]any{"from": "workspace://src", "to": "one.txt"}), "not a directory")
	mustContain(t, stage(map[string]any{"from": "workspace://."}), "workspace root")
	// A failing cp is reported with its own words.
	h.sbRun("mkdir", "-p", "clash/a.txt")
	mustContain(t, stage(map[string]any{"from": "workspace://src", "to": "clash"}), "cp exited with status 1", "cannot overwrite directory")
	// Inputs before a failing one are reported as staged.
	mustContain(t, h.fail("stage_inputs", map[string]any{"inputs": []map[string]any{
		{"from": "workspace://one.txt", "to": "three.txt"},
		{"from": "workspace://missing"},
	}}), "inputs before it were staged: workspace://one.txt")
	h.fail("stage_inputs", map[string]any{"inputs": []map[string]any{{"from": "workspace://one.txt", "mode": "move"}}})
	h.fail("stage_inputs", map[string]any{"inputs": []map[string]any{{"to": "x"}}})
	h.fail("stage_inputs", map[string]any{"inputs": []any{}})
}

// Each input is resolved against what the inputs before it made: a later
// input that fails removes only what it created, not a directory an earlier
// input of the same call created and filled.
func TestStageInputsFailureKeepsEarlierInputs(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("A"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	l := h.lease()
	st := &stager{c: &Call{d: h.deps, ws: h.ws, tool: "stage_inputs", lease: l}, cli: l.Client, root: l.Sandbox.Workdir}
	plan := func(i int, rel, to string) stagePlan {
		from := "host://data/" + rel
		return stagePlan{field: fmt.Sprintf("inputs[%d]", i), spec: stageInputSpec{From: from, To: to}, mode: "copy", to: to,
			tree: &hostTree{from: from, root: root, rel: rel, files: []hostFile{{size: 1, mode: 0o644}}}}
	}
	if _, err := st.stage(t.Context(), plan(0, "a.txt", "out/a.txt")); err != nil {
		t.Fatal(err)
	}
	// A file that went away after the scan: its upload fails.
	if _, err := st.stage(t.Context(), plan(1, "gone.txt", "out/b.txt")); err == nil {
		t.Fatal("staging a file that is gone succeeded")
	}
	if !h.sbExists("out/a.txt") || string(h.sbRead("out/a.txt")) != "A" {
		t.Fatal("the failed input removed what the input before it staged")
	}
}

// Progress across several inputs grows from one input to the next and ends
// at the files of all of them (MCP requires each notification's progress
// to be above the one before).
func TestStageInputsProgressIsMonotone(t *testing.T) {
	data := t.TempDir()
	for _, f := range []string{"one/a", "one/b", "one/c", "two/d", "two/e"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(data, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := newHarness(t, harnessOptions{config: Config{StageRoots: map[string]string{"data": data}}})
	args := map[string]any{"inputs": []map[string]any{{"from": "host://data/one"}, {"from": "host://data/two"}, {"from": "host://data/one/a", "to": "again/a"}}}
	res, err := h.callErr(context.Background(), "stage_inputs", args, "stage-1")
	if err != nil || res.IsError {
		t.Fatalf("%v %v", err, resultText(res))
	}
	final := func() float64 {
		ns := h.progress()
		if len(ns) == 0 {
			return 0
		}
		v, _ := ns[len(ns)-1].Params.AdditionalFields["progress"].(float64)
		return v
	}
	waitFor(t, "the last progress notification", func() bool { return final() == 6 })
	last := 0.0
	for _, n := range h.progress() {
		v, _ := n.Params.AdditionalFields["progress"].(float64)
		msg, _ := n.Params.AdditionalFields["message"].(string)
		if v <= last || !strings.HasSuffix(msg, " of 6 files") {
			t.Fatalf("progress %v (%q) after %v: %v", v, msg, last, h.progress())
		}
		last = v
	}
}

package tools

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	envdclient "github.com/sandbox-mcp/sandbox-mcp/envd/client"
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

func TestCollectOutputs(t *testing.T) {
	art := t.TempDir()
	h := newHarness(t, harnessOptions{config: Config{ArtifactsDir: art}})
	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": "out/a.txt", "content": "alpha"},
		{"path": "out/sub/b.txt", "content": "beta"},
		{"path": "out/sub/c.bin", "content": base64.StdEncoding.EncodeToString([]byte{0, 1, 2}), "encoding": "base64"},
		{"path": "other/x.txt", "content": "x"},
		{"path": "run.sh", "content": "#!/bin/sh\n", "mode": "0755"},
		{"path": toolDataDir + "/runs/1/stdout.log", "content": "log"},
	}}, nil)

	out, _ := okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"out/**/*.txt", "nomatch/*"}, "inline": true})
	if len(out.Artifacts) != 2 || out.Matched != 2 || !slices.Equal(out.Unmatched, []string{"nomatch/*"}) || len(out.LimitsHit) != 0 {
		t.Fatalf("collect = %+v", out)
	}
	a := out.Artifacts[0]
	sum := sha256.Sum256([]byte("alpha"))
	if a.Name != "out/a.txt" || a.Ref != "artifact://out/a.txt" || a.Path != "out/a.txt" || a.Bytes != 5 || a.SHA256 != hex.EncodeToString(sum[:]) || a.Content != "alpha" {
		t.Errorf("artifact = %+v", a)
	}
	if out.Store != filepath.Join(art, workspaceDirName(h.ws.Key)) {
		t.Errorf("store = %s", out.Store)
	}
	if got, err := os.ReadFile(filepath.Join(out.Store, "out", "sub", "b.txt")); err != nil || string(got) != "beta" {
		t.Errorf("stored b.txt = %q, %v", got, err)
	}

	// ** matches at any depth; the tools' own logs are left out; binary is
	// not inlined.
	out, _ = okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"**"}, "inline": true})
	var names []string
	for _, a := range out.Artifacts {
		names = append(names, a.Name)
		if a.Name == "out/sub/c.bin" && (a.Content != "" || !strings.Contains(a.ContentOmitted, "binary")) {
			t.Errorf("binary inlined: %+v", a)
		}
	}
	if !slices.Equal(names, []string{"other/x.txt", "out/a.txt", "out/sub/b.txt", "out/sub/c.bin", "run.sh"}) {
		t.Errorf("** collected %v", names)
	}
	if fi, err := os.Stat(filepath.Join(out.Store, "run.sh")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("stored run.sh mode = %v, %v; want 0700 (executable, private)", fi.Mode(), err)
	}
	out, _ = okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{toolDataDir + "/**"}})
	if len(out.Artifacts) != 1 || out.Artifacts[0].Name != toolDataDir+"/runs/1/stdout.log" {
		t.Errorf("run logs by name = %+v", out.Artifacts)
	}

	// Caps.
	out, res := okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"out/**"}, "max_files": 1})
	if len(out.Artifacts) != 1 || out.Matched != 3 || !slices.Equal(out.LimitsHit, []string{"max_files"}) {
		t.Errorf("max_files: %+v", out)
	}
	mustContain(t, resultText(res), "NOTICE:", "max_files (1)")
	out, _ = okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"out/**"}, "max_bytes": 8})
	if len(out.Artifacts) != 1 || !slices.Equal(out.LimitsHit, []string{"max_bytes"}) {
		t.Errorf("max_bytes: %+v", out)
	}

	// name_prefix, and replacing an artifact of the same name.
	h.sbWrite("out/a.txt", "ALPHA2")
	out, _ = okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"out/a.txt"}, "name_prefix": "run-2/"})
	if len(out.Artifacts) != 1 || out.Artifacts[0].Ref != "artifact://run-2/out/a.txt" {
		t.Errorf("prefixed = %+v", out.Artifacts)
	}
	h.ok("collect_outputs", map[string]any{"globs": []string{"out/a.txt"}}, nil)
	if got, _ := os.ReadFile(filepath.Join(out.Store, "out", "a.txt")); string(got) != "ALPHA2" {
		t.Errorf("replaced artifact = %q", got)
	}
	// A name that needs a directory where an artifact file is.
	mustContain(t, h.fail("collect_outputs", map[string]any{"globs": []string{"out/a.txt"}, "name_prefix": "run.sh"}), "conflicts")

	// Bad arguments.
	mustContain(t, h.fail("collect_outputs", map[string]any{"globs": []string{"../x"}}), "globs[0]", "..")
	mustContain(t, h.fail("collect_outputs", map[string]any{"globs": []string{"/etc/*"}}), "absolute")
	mustContain(t, h.fail("collect_outputs", map[string]any{"globs": []string{"*"}, "name_prefix": "../up"}), "name_prefix", "leaves")
	h.fail("collect_outputs", map[string]any{"globs": []string{}})
	h.fail("collect_outputs", map[string]any{"globs": "out/**"})
	h.fail("collect_outputs", map[string]any{"globs": []string{"*"}, "max_files": 0})
	h.sbRun("ln", "-s", "/etc", "etclink")
	mustContain(t, h.fail("collect_outputs", map[string]any{"globs": []string{"etclink/*"}}), "outside the workspace")

	// No store configured.
	h2 := newHarness(t, harnessOptions{})
	mustContain(t, h2.fail("collect_outputs", map[string]any{"globs": []string{"*"}}), "artifact store", "--artifacts-dir")
	mustContain(t, h2.fail("stage_inputs", map[string]any{"inputs": []map[string]any{{"from": "artifact://x"}}}), "artifact store")
}

func TestCollectOutputsInlineBudget(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{ArtifactsDir: t.TempDir(), MaxReadBytes: 6}})
	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": "a.txt", "content": "alpha"},
		{"path": "b.txt", "content": "beta"},
	}}, nil)
	out, _ := okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"*.txt"}, "inline": true})
	if len(out.Artifacts) != 2 || out.Artifacts[0].Content != "alpha" || out.Artifacts[1].Content != "" || !strings.Contains(out.Artifacts[1].ContentOmitted, "inline budget") {
		t.Errorf("inline budget: %+v", out.Artifacts)
	}
}

// A file that grew past what is left of max_bytes between its listing and
// its download is not stored, and the artifact of the same name that an
// earlier call stored stays as it was (no temporary is left either).
func TestCollectGrownFileKeepsEarlierArtifact(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{ArtifactsDir: t.TempDir()}})
	h.sbWrite("out/a.txt", "good")
	h.ok("collect_outputs", map[string]any{"globs": []string{"out/a.txt"}}, nil)
	h.sbWrite("out/a.txt", "grown past the room")

	store, err := artifactStoreFor(h.deps.Config, h.ws)
	if err != nil {
		t.Fatal(err)
	}
	root, err := store.openForWrite()
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	l := h.lease()
	c := &Call{ctx: context.Background(), d: h.deps, ws: h.ws, tool: "collect_outputs", lease: l}
	f := collectFile{abs: h.sbPath("out/a.txt"), rel: "out/a.txt", size: 4, mode: 0o644}
	inlineLeft := int64(1 << 10)
	a, err := collectOne(t.Context(), c, l.Client, root, f, "out/a.txt", 4, true, &inlineLeft)
	if err != nil || a != nil {
		t.Fatalf("collectOne of a grown file = %+v, %v; want nil, nil", a, err)
	}
	if got, err := os.ReadFile(filepath.Join(store.dir, "out", "a.txt")); err != nil || string(got) != "good" {
		t.Fatalf("the earlier artifact is now %q, %v; want it kept", got, err)
	}
	entries, err := os.ReadDir(filepath.Join(store.dir, "out"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("store holds %v, %v; want only a.txt", entries, err)
	}
	if inlineLeft != 1<<10 {
		t.Errorf("the inline budget was charged: %d", inlineLeft)
	}
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

// The artifact store outlives the sandbox: after a loss and recreation,
// stage_inputs brings the collected files back.
func TestArtifactRoundTripAcrossRecreation(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{ArtifactsDir: t.TempDir()}})
	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": "out/result.txt", "content": "42"},
		{"path": "out/bin/tool.sh", "content": "#!/bin/sh\n", "mode": "0755"},
	}}, nil)
	coll, _ := okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"out/**"}})
	if len(coll.Artifacts) != 2 {
		t.Fatalf("collected %+v", coll.Artifacts)
	}
	old := h.lease()
	if err := h.provider.LoseDaemon(old.Sandbox.ID, false); err != nil {
		t.Fatal(err)
	}
	text := h.fail("list_files", map[string]any{})
	mustContain(t, text, "NOTICE:", "recreated (generation 1 → 2)", "NOT run")

	out, _ := okAs[stageInputsOutput](h, "stage_inputs", map[string]any{"inputs": []map[string]any{
		{"from": "artifact://out/result.txt"},
		{"from": "artifact://out", "to": "restored"},
	}})
	if out.Staged[0].To != "result.txt" || out.Staged[1].Files != 2 {
		t.Errorf("staged = %+v", out.Staged)
	}
	if got := string(h.sbRead("result.txt")); got != "42" {
		t.Errorf("result.txt = %q", got)
	}
	if e, err := h.sbStat("restored/bin/tool.sh"); err != nil || e.Mode != 0o755 {
		t.Errorf("restored/bin/tool.sh = %+v, %v", e, err)
	}
	if h.lease().Generation != 2 {
		t.Errorf("generation = %d, want 2", h.lease().Generation)
	}
	mustContain(t, h.fail("stage_inputs", map[string]any{"inputs": []map[string]any{{"from": "artifact://nope"}}}), `artifact "nope" does not exist`)
	mustContain(t, h.fail("stage_inputs", map[string]any{"inputs": []map[string]any{{"from": "artifact://../x"}}}), "leaves the artifact store")
	mustContain(t, h.fail("stage_inputs", map[string]any{"inputs": []map[string]any{{"from": "artifact://out", "mode": "link"}}}), "link works only")
}

func TestWorkspaceDirName(t *testing.T) {
	a, b := workspaceDirName("alice:session/1"), workspaceDirName("alice:session-1")
	if a == b {
		t.Errorf("distinct keys share a directory: %s", a)
	}
	for _, key := range []string{"", "..", "/", "../../etc", strings.Repeat("x", 500), "ü\x00/"} {
		n := workspaceDirName(key)
		if !filepath.IsLocal(n) || strings.ContainsAny(n, "/\x00") || strings.HasPrefix(n, ".") || len(n) > 80 {
			t.Errorf("workspaceDirName(%q) = %q", key, n)
		}
	}
	if n := workspaceDirName("test:TestX"); !strings.HasSuffix(n, "-test-TestX") {
		t.Errorf("slug of test:TestX = %q", n)
	}
}

//go:build linux

package tools

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCollectOutputs(t *testing.T) {
	art := t.TempDir()
	h := newHarness(t, harnessOptions{config: Config{ArtifactsDir: art}})
	h.ok("put_files", map[string]any{"files": []map[string]any{
		{"path": "out/a.txt", "content": "alpha"},
		{"path": "out/sub/b.txt", "content": "beta"},
		{"path": "out/sub/c.bin", "content": base64.StdEncoding.EncodeToString([]byte{0, 1, 2}), "encoding": "base64"},
		{"path": "out/dot.png", "content": base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")), "encoding": "base64"},
		{"path": "other/x.txt", "content": "x"},
		{"path": "run.sh", "content": "#!/bin/sh\n", "mode": "0755"},
		{"path": toolDataDir + "/runs/1/stdout.log", "content": "log"},
	}}, nil)

	out, res := okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"out/**/*.txt", "nomatch/*"}, "inline": true})
	// The host's paths of the store are not the model's business.
	if raw, _ := json.Marshal(res); strings.Contains(string(raw), art) {
		t.Errorf("the result shows the store's host path %s: %s", art, raw)
	}
	if len(out.Artifacts) != 2 || out.Matched != 2 || !slices.Equal(out.Unmatched, []string{"nomatch/*"}) || len(out.LimitsHit) != 0 {
		t.Fatalf("collect = %+v", out)
	}
	a := out.Artifacts[0]
	sum := sha256.Sum256([]byte("alpha"))
	if a.Name != "out/a.txt" || a.Ref != "artifact://out/a.txt" || a.Path != "out/a.txt" || a.Bytes != 5 || a.SHA256 != hex.EncodeToString(sum[:]) || a.Content != "alpha" {
		t.Errorf("artifact = %+v", a)
	}
	store := filepath.Join(art, workspaceDirName(h.ws.Key))
	if got, err := os.ReadFile(filepath.Join(store, "out", "sub", "b.txt")); err != nil || string(got) != "beta" {
		t.Errorf("stored b.txt = %q, %v", got, err)
	}

	// ** matches at any depth; the tools' own logs are left out; binary is
	// not inlined.
	out, _ = okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"**"}, "inline": true})
	var names []string
	for _, a := range out.Artifacts {
		names = append(names, a.Name)
		if a.Name == "out/sub/c.bin" && (a.Content != "" || !strings.Contains(a.ContentOmitted, "binary") || strings.Contains(a.ContentOmitted, "image")) {
			t.Errorf("binary inlined: %+v", a)
		}
		// An image is not to be read as base64: read_files shows it.
		if a.Name == "out/dot.png" && (a.Content != "" || !strings.Contains(a.ContentOmitted, "image/png") || !strings.Contains(a.ContentOmitted, "read_files on its path shows it") || strings.Contains(a.ContentOmitted, "base64")) {
			t.Errorf("image: %+v", a)
		}
	}
	if !slices.Equal(names, []string{"other/x.txt", "out/a.txt", "out/dot.png", "out/sub/b.txt", "out/sub/c.bin", "run.sh"}) {
		t.Errorf("** collected %v", names)
	}
	if fi, err := os.Stat(filepath.Join(store, "run.sh")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("stored run.sh mode = %v, %v; want 0700 (executable, private)", fi.Mode(), err)
	}
	out, _ = okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{toolDataDir + "/**"}})
	if len(out.Artifacts) != 1 || out.Artifacts[0].Name != toolDataDir+"/runs/1/stdout.log" {
		t.Errorf("run logs by name = %+v", out.Artifacts)
	}

	// Caps.
	out, res = okAs[collectOutputsOutput](h, "collect_outputs", map[string]any{"globs": []string{"out/**"}, "max_files": 1})
	// The listing stops at the first match past max_files: matched is a
	// lower bound.
	if len(out.Artifacts) != 1 || out.Matched != 2 || !slices.Equal(out.LimitsHit, []string{"max_files"}) {
		t.Errorf("max_files: %+v", out)
	}
	mustContain(t, resultText(res), "NOTICE:", "max_files (1)", "at least 2 files matched")
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
	if got, _ := os.ReadFile(filepath.Join(store, "out", "a.txt")); string(got) != "ALPHA2" {
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

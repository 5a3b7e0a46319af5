//go:build linux

package tools

import (
	"slices"
	"testing"
	"time"
)

func TestWorkspaceInfo(t *testing.T) {
	h := newHarness(t, harnessOptions{config: Config{
		StageRoots:   map[string]string{"models": t.TempDir(), "data": t.TempDir()},
		ArtifactsDir: t.TempDir(),
	}})
	info, _ := okAs[workspaceInfoOutput](h, "workspace_info", map[string]any{})
	l := h.lease()
	if info.Provider != "test" || info.SandboxID != l.Sandbox.ID || info.Generation != 1 || info.State != "running" ||
		info.Isolation != "none" || info.Workdir != l.Sandbox.Workdir || info.EnvdVersion == "" {
		t.Errorf("info = %+v", info)
	}
	if created, err := time.Parse(time.RFC3339, info.CreatedAt); err != nil || time.Since(created) > time.Hour || info.AgeSec < 0 {
		t.Errorf("created_at %q (%v), age_sec %d", info.CreatedAt, err, info.AgeSec)
	}
	if len(info.Warnings) == 0 {
		t.Error("an unisolated sandbox reports no warning")
	}
	def := DefaultConfig()
	want := workspaceLimit{
		DefaultTimeoutSec: int64(def.DefaultTimeout / time.Second), MaxTimeoutSec: int64(def.MaxTimeout / time.Second),
		OutputLimitBytes: def.OutputLimit, MaxPutBytes: def.MaxPutBytes, MaxReadBytes: def.MaxReadBytes,
	}
	if info.Limits != want {
		t.Errorf("limits = %+v, want %+v", info.Limits, want)
	}
	if !slices.Equal(info.Toolsets, []string{"exec", "process", "files", "transfer", "admin"}) || info.ReadOnly {
		t.Errorf("toolsets = %v, read-only %v", info.Toolsets, info.ReadOnly)
	}
	if !slices.Equal(info.StageRoots, []string{"data", "models"}) || !info.Artifacts {
		t.Errorf("stage_roots %v, artifacts %v", info.StageRoots, info.Artifacts)
	}
	h.fail("workspace_info", map[string]any{"verbose": true})

	// A server exposing some toolsets says which.
	h2 := newHarness(t, harnessOptions{config: Config{Toolsets: []string{"admin", "files"}}})
	info, _ = okAs[workspaceInfoOutput](h2, "workspace_info", nil)
	if !slices.Equal(info.Toolsets, []string{"files", "admin"}) || len(info.StageRoots) != 0 || info.Artifacts {
		t.Errorf("toolsets %v, stage_roots %v, artifacts %v", info.Toolsets, info.StageRoots, info.Artifacts)
	}
}

func TestWorkspaceReset(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ok("put_files", map[string]any{"files": []map[string]any{{"path": "keep.txt", "content": "x"}}}, nil)
	oldID := h.lease().Sandbox.ID

	// confirm: true is the only way in: the schema refuses a missing or
	// non-boolean confirm, the handler refuses false.
	for _, args := range []map[string]any{{}, {"confirm": false}, {"confirm": "yes"}} {
		mustContain(t, h.fail("workspace_reset", args), "invalid argument", "confirm")
	}
	mustContain(t, h.fail("workspace_reset", map[string]any{"confirm": false}), "invalid argument confirm: must be true to reset")
	if !h.sbExists("keep.txt") || h.lease().Generation != 1 {
		t.Fatal("a refused reset changed the workspace")
	}

	out, res := okAs[workspaceResetOutput](h, "workspace_reset", map[string]any{"confirm": true})
	if out.Generation != 2 || out.PreviousGeneration != 1 || out.SandboxID == "" || out.SandboxID == oldID {
		t.Errorf("reset = %+v (old id %s)", out, oldID)
	}
	mustContain(t, resultText(res), "NOTICE:", "reset (generation 1 → 2)", "files from before are gone")
	if h.sbExists("keep.txt") {
		t.Error("keep.txt survived the reset")
	}
	info, _ := okAs[workspaceInfoOutput](h, "workspace_info", nil)
	if info.Generation != 2 || info.SandboxID != out.SandboxID {
		t.Errorf("after reset: %+v", info)
	}
	if slices.Contains(h.provider.Live(), oldID) {
		t.Errorf("the old sandbox %s still exists", oldID)
	}
}

// Every file, transfer and admin tool reports a lost sandbox with the
// recreation notice (and runs nothing), so the model re-checks its
// environment.
func TestFileToolsReportLostSandbox(t *testing.T) {
	calls := []struct {
		tool string
		args map[string]any
	}{
		{"put_files", map[string]any{"files": []map[string]any{{"path": "a.txt", "content": "x"}}}},
		{"read_files", map[string]any{"paths": []string{"a.txt"}}},
		{"list_files", map[string]any{}},
		{"stage_inputs", map[string]any{"inputs": []map[string]any{{"from": "workspace://a.txt", "to": "b.txt"}}}},
		{"collect_outputs", map[string]any{"globs": []string{"*.txt"}}},
		{"workspace_info", map[string]any{}},
	}
	for _, tc := range calls {
		t.Run(tc.tool, func(t *testing.T) {
			h := newHarness(t, harnessOptions{config: Config{ArtifactsDir: t.TempDir()}})
			h.ok("put_files", map[string]any{"files": []map[string]any{{"path": "a.txt", "content": "x"}}}, nil)
			if err := h.provider.LoseDaemon(h.lease().Sandbox.ID, false); err != nil {
				t.Fatal(err)
			}
			mustContain(t, h.fail(tc.tool, tc.args), "NOTICE: The sandbox was recreated (generation 1 → 2)", "NOT run")
			if h.lease().Generation != 2 {
				t.Errorf("generation = %d", h.lease().Generation)
			}
		})
	}
}

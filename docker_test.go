//go:build linux

package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker/dockertest"
)

// TestServeDockerProvider: `serve --provider docker` runs a tool call in a
// container of the test image, with the embedded lean envd as its
// entrypoint, and says so in workspace_info; search_files runs that envd's
// search mode.
func TestServeDockerProvider(t *testing.T) {
	if envdbin.Lookup(runtime.GOARCH) == nil {
		testenv.Missing(t, "the embedded lean envd for linux/%s, which docker sandboxes mount: run make envd before go test (scripts/test does)", runtime.GOARCH)
	}
	img := dockertest.BusyboxImage(t, dockertest.Engine(t))
	c := stdioClient(t, "--provider", "docker", "--docker-image", img)
	ctx := t.Context()
	res := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "echo hi; pwd; ls /sys/class/net"})
	if res.IsError {
		t.Fatalf("workspace_exec: %s", textOf(res))
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.ExitCode != 0 || out.Stdout != "hi\n/workspace\nlo\n" {
		t.Fatalf("workspace_exec in a docker sandbox: %s (%v)", raw, err)
	}
	if checkSearchFiles(t, c) {
		t.Error("search_files uploaded its helper into a docker sandbox, which mounts the lean envd at /.sandbox-mcp/envd")
	}
	info := callTool(t, ctx, c, "workspace_info", map[string]any{})
	if raw, _ := json.Marshal(info.StructuredContent); !strings.Contains(string(raw), `"provider":"docker"`) {
		t.Fatalf("workspace_info: %s", raw)
	}
}

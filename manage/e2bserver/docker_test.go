//go:build linux

package e2bserver

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker/dockertest"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// TestDockerProvider: the server over the docker provider (manage serve
// --provider docker): create, a command and a file through the proxy,
// pause, connect with the file kept, kill.
func TestDockerProvider(t *testing.T) {
	cli := dockertest.Engine(t)
	p, err := docker.New(t.Context(), docker.Config{
		StateDir:   envdtest.ShortTempDir(t),
		Image:      dockertest.BusyboxImage(t, cli),
		EnvdBinary: envdtest.LeanBinary(t),
		Logger:     quietLog(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	h := start(t, p, "")
	sb := h.create(keyA, e2bapi.NewSandbox{Timeout: 600, Secure: ptr(true)})
	c := h.envd(sb)
	runTrue(t, c)
	ctx := context.Background()
	if err := c.Upload(ctx, "/workspace/kept", strings.NewReader("kept"), envdclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	h.status(http.StatusNoContent, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", nil, nil)
	h.status(http.StatusCreated, keyA, http.MethodPost, "/sandboxes/"+sb.SandboxID+"/connect", e2bapi.ConnectSandbox{Timeout: 60}, nil)
	res, err := c.Run(ctx, envdclient.Command{Cmd: "cat", Args: []string{"/workspace/kept"}}, envdclient.RunOptions{})
	if err != nil || string(res.Stdout.Bytes()) != "kept" {
		t.Fatalf("after pause and connect: %v %+v", err, res)
	}
	h.status(http.StatusNoContent, keyA, http.MethodDelete, "/sandboxes/"+sb.SandboxID, nil, nil)
	if _, code := h.detail(keyA, sb.SandboxID); code != http.StatusNotFound {
		t.Fatalf("after kill: GET %d", code)
	}
}

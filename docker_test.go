//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker"
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

// requireLeanEnvd ends the test when the binary carries no lean envd for
// this machine, which docker sandboxes mount.
func requireLeanEnvd(t *testing.T) {
	t.Helper()
	if envdbin.Lookup(runtime.GOARCH) == nil {
		testenv.Missing(t, "the embedded lean envd for linux/%s, which docker sandboxes mount: run make envd before go test (scripts/test does)", runtime.GOARCH)
	}
}

// TestServeDockerNamedWorkspace: a named workspace's container removed
// behind the server's back (docker rm -f); the next call says the sandbox
// was recreated, that the workspace's files were kept and what was not,
// and that it did not run; the file written before is still there.
func TestServeDockerNamedWorkspace(t *testing.T) {
	requireLeanEnvd(t)
	cli := dockertest.Engine(t)
	img := dockertest.BusyboxImage(t, cli)
	name := fmt.Sprintf("dockervol-%d", time.Now().UnixNano())
	c := stdioClient(t, "--provider", "docker", "--docker-image", img, "--workspace", name)
	ctx := t.Context()
	if res := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "echo kept > notes.txt; echo gone > /root/pkg"}); res.IsError {
		t.Fatalf("workspace_exec: %s", textOf(res))
	}
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelKey+"=stdio:"+name))})
	if err != nil || len(cs) != 1 {
		t.Fatalf("containers of workspace %s: %d, %v", name, len(cs), err)
	}
	removeDockerWorkspace(t, cli, name)
	if err := cli.ContainerRemove(ctx, cs[0].ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	res := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "cat notes.txt"})
	text := textOf(res)
	for _, want := range []string{"NOTICE: The sandbox was recreated (generation 1 → 2)", "Files in the workspace directory were kept", "installed packages, changes outside the workspace and running processes from before are gone", "This command was NOT run"} {
		if !strings.Contains(text, want) {
			t.Errorf("the call after docker rm -f lacks %q:\n%s", want, text)
		}
	}
	res = callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "cat notes.txt; cat /root/pkg 2>/dev/null || echo no-pkg"})
	raw, _ := json.Marshal(res.StructuredContent)
	var out struct {
		Stdout string `json:"stdout"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || res.IsError || out.Stdout != "kept\nno-pkg\n" {
		t.Fatalf("on the replacement: %s", textOf(res))
	}
}

// removeDockerWorkspace removes named workspace name's containers and
// volume once the test is done: the server pauses them at exit.
func removeDockerWorkspace(t *testing.T, cli *dockerclient.Client, name string) {
	t.Cleanup(func() {
		ctx := context.Background()
		cs, _ := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelKey+"=stdio:"+name))})
		for _, c := range cs {
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
		vs, _ := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", docker.LabelKey+"=stdio:"+name))})
		for _, v := range vs.Volumes {
			_ = cli.VolumeRemove(ctx, v.Name, true)
		}
	})
}

// TestServeDockerSharedWorkspace: two servers on one named docker
// workspace; the first exits while the second has a background process in
// the container, which goes on, as do the second's commands. The container
// is paused only when the second exits too.
func TestServeDockerSharedWorkspace(t *testing.T) {
	requireLeanEnvd(t)
	cli := dockertest.Engine(t)
	img := dockertest.BusyboxImage(t, cli)
	name := fmt.Sprintf("dockershared-%d", time.Now().UnixNano())
	removeDockerWorkspace(t, cli, name)
	state := sharedState(t)
	flags := []string{"--provider", "docker", "--docker-image", img, "--workspace", name}
	a := startShared(t, state, flags...)
	a.exec("true", false)
	b := startShared(t, state, flags...)
	b.exec("sleep 300", true)
	a.exit()
	if !b.sleeperRunning() {
		t.Fatal("the background sleep of the second server died when the first exited")
	}
	if got := textOf(b.exec("echo ran", false)); !strings.Contains(got, "ran") {
		t.Fatalf("the second server's command after the first exited: %q", got)
	}
	ctx := t.Context()
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelKey+"=stdio:"+name))})
	if err != nil || len(cs) != 1 || cs[0].State != "running" {
		t.Fatalf("containers of the workspace while the second server runs: %+v, %v; want one running", cs, err)
	}
	b.exit()
	ci, err := cli.ContainerInspect(ctx, cs[0].ID)
	if err != nil || !ci.State.Paused {
		t.Fatalf("the container after the last server exited: %+v, %v; want paused", ci.State, err)
	}
}

// TestServeDockerTCPTransport: `serve --provider docker --docker-transport
// tcp`, the transport of Docker Desktop, on this machine's engine.
func TestServeDockerTCPTransport(t *testing.T) {
	requireLeanEnvd(t)
	img := dockertest.BusyboxImage(t, dockertest.Engine(t))
	c := stdioClient(t, "--provider", "docker", "--docker-image", img, "--docker-transport", "tcp")
	ctx := t.Context()
	res := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "echo over-tcp"})
	if text := textOf(res); res.IsError || !strings.Contains(text, "over-tcp") || !strings.Contains(text, "without NAT") {
		t.Fatalf("workspace_exec over tcp: %s", text)
	}
}

// BenchmarkStdioDockerExecTrue is BenchmarkStdioBinaryExecTrue on the
// docker provider: workspace_exec `true` through the built binary over
// stdio, in a running container (the socket transport, then tcp).
func BenchmarkStdioDockerExecTrue(b *testing.B) {
	if envdbin.Lookup(runtime.GOARCH) == nil {
		testenv.Missing(b, "the embedded lean envd for linux/%s: run make envd first", runtime.GOARCH)
	}
	img := dockertest.BusyboxImage(b, dockertest.Engine(b))
	for _, tr := range []string{"socket", "tcp"} {
		b.Run(tr, func(b *testing.B) {
			benchExecTrue(b, stdioClient(b, "--provider", "docker", "--docker-image", img, "--docker-transport", tr))
		})
	}
}

// TestServeDockerDamagedStateDB: a named docker workspace's state.db
// damaged between two servers; the next call used to get a new empty
// container (the old one orphaned). Now it reaches the same container,
// with its file and its background process, and says once that the store
// was rebuilt and the sandbox recovered.
func TestServeDockerDamagedStateDB(t *testing.T) {
	requireLeanEnvd(t)
	cli := dockertest.Engine(t)
	img := dockertest.BusyboxImage(t, cli)
	name := fmt.Sprintf("dockerdamaged-%d", time.Now().UnixNano())
	removeDockerWorkspace(t, cli, name)
	n := newNewcomer(t)
	call := "./sandbox-mcp call --provider docker --docker-image " + img + " --workspace " + name + " "
	n.mustRun(call + `put_files '{"files": [{"path": "kept.txt", "content": "still here"}]}'`)
	n.mustRun(call + `workspace_exec '{"command": "sleep 3600", "background": true}'`)
	ctx := t.Context()
	list := func() []container.Summary {
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelKey+"=stdio:"+name))})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	before := list()
	if len(before) != 1 {
		t.Fatalf("containers of the workspace: %+v; want one", before)
	}
	db := filepath.Join(n.dir, "state", "state.db")
	if err := os.Truncate(db, 8192); err != nil {
		t.Fatal(err)
	}
	out, errs, code := n.run(call+`workspace_exec '{"command": "cat kept.txt; ps | grep -q \"[s]leep 3600\" && echo alive"}'`, nil)
	if code != 0 {
		t.Fatalf("first call after the damage: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if !strings.Contains(out, "still here") || !strings.Contains(out, "alive") {
		t.Errorf("first call after the damage lacks the file or the process:\n%s\nstderr: %s", out, errs)
	}
	if strings.Count(out, "NOTICE: "+rebuiltNotice) != 1 {
		t.Errorf("first call after the damage: want the rebuild notice once:\n%s", out)
	}
	if after := list(); len(after) != 1 || after[0].ID != before[0].ID {
		t.Errorf("containers of the workspace after the rebuild: %+v; want only %s", after, before[0].ID)
	}
	if aside, _ := filepath.Glob(db + ".corrupt-*"); len(aside) != 1 {
		t.Errorf("state.db not moved aside: %v", aside)
	}
	out = n.mustRun(call + `read_files '{"paths": ["kept.txt"]}'`)
	if !strings.Contains(out, "still here") || strings.Contains(out, "damaged") {
		t.Errorf("second call: want the file and no notice:\n%s", out)
	}
}

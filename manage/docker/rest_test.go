//go:build linux

package docker

// The reaper of unowned containers, named workspaces' volumes, the tcp
// transport, disk and network options: on the real engine.

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker/dockertest"
)

// stranger starts a container of image that is not the provider's but
// carries its labels (copied from sandbox id, or made up when id is not
// one of the provider's), with name; it is removed when the test ends.
func stranger(t *testing.T, cli *client.Client, p *Provider, image, name, id string) string {
	t.Helper()
	labels := map[string]string{LabelProvider: Name, LabelOwner: p.Owner(), LabelID: id, LabelKey: "stolen"}
	return strangerWithLabels(t, cli, image, name, labels)
}

// strangerWithLabels starts a container of image with labels and name, as
// anyone who can reach the engine can; it is removed when the test ends.
func strangerWithLabels(t *testing.T, cli *client.Client, image, name string, labels map[string]string) string {
	t.Helper()
	resp, err := cli.ContainerCreate(t.Context(), &container.Config{Image: image, Cmd: []string{"sleep", "300"}, Labels: labels},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(t.Context(), resp.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return resp.ID
}

// exists reports whether the engine has container ref.
func exists(t *testing.T, cli *client.Client, ref string) bool {
	t.Helper()
	_, err := cli.ContainerInspect(t.Context(), ref)
	return err == nil
}

// At start the reaper removes the provider's containers that no store
// record owns (one made and forgotten, one started by someone else with
// copied labels) and keeps the owned one; a container that takes an owned
// sandbox's name and labels after it was removed is never adopted.
func TestReapUnowned(t *testing.T) {
	p := newProvider(t, nil)
	cli := dockertest.Engine(t)
	img := dockertest.BusyboxImage(t, cli)
	ctx := t.Context()
	owned, c := create(t, p, manage.SandboxConfig{Key: "owned"})
	forgotten, _ := create(t, p, manage.SandboxConfig{Key: "forgotten"})
	copied := stranger(t, cli, p, img, "sandbox-mcp-test-copied-"+owned.ID, owned.ID)
	store := manage.NewMemoryStore()
	if err := store.Put(ctx, manage.Record{Key: "owned", Provider: Name, SandboxID: owned.ID, Generation: 1, State: manage.StateRunning}); err != nil {
		t.Fatal(err)
	}
	rep, err := p.ReapUnowned(ctx, store, ReapOptions{MinAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reaped %+v", rep)
	if exists(t, cli, containerName(forgotten.ID)) || exists(t, cli, copied) {
		t.Fatalf("after the reaper: the forgotten sandbox or the copied-label container is still there (%+v)", rep)
	}
	if !slices.Contains(rep.Containers, "/"+containerName(forgotten.ID)) || len(rep.Containers) != 2 || !slices.Contains(rep.Dirs, forgotten.ID) {
		t.Fatalf("report %+v; want the forgotten sandbox, the copied container and the forgotten directory", rep)
	}
	if res := run(t, c, "echo alive"); stdout(res) != "alive\n" {
		t.Fatalf("the owned sandbox after the reaper: %q", stdout(res))
	}

	// Someone takes the owned sandbox's name and labels once it is gone.
	if err := cli.ContainerRemove(ctx, containerName(owned.ID), container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	stranger(t, cli, p, img, containerName(owned.ID), owned.ID)
	info, err := p.Info(ctx, owned.ID)
	if err != nil || info.State != manage.StateGone {
		t.Fatalf("Info of a sandbox whose name a stranger took: %+v, %v; want gone", info, err)
	}
	if err := p.Pause(ctx, owned.ID); err == nil {
		t.Fatal("Pause acted on a stranger's container")
	}
	if list, _ := p.List(ctx); len(list) != 0 {
		t.Fatalf("List shows a stranger's container: %+v", list)
	}
	if err := p.Kill(ctx, owned.ID); err != nil {
		t.Fatal(err)
	}
	if !exists(t, cli, containerName(owned.ID)) {
		t.Fatal("Kill removed a container the provider did not make")
	}
}

// A named workspace's files live in a labelled volume: a new sandbox of the
// same key finds them and says so (WorkspaceKept), while files outside the
// workspace are the image's; Kill removes the volume.
func TestNamedWorkspaceVolume(t *testing.T) {
	p := newProvider(t, nil)
	cli := dockertest.Engine(t)
	ctx := t.Context()
	cfg := manage.SandboxConfig{Key: "stdio:vol", Named: true}
	first, c := create(t, p, cfg)
	if first.WorkspaceKept {
		t.Fatal("the first sandbox of a key says it kept files")
	}
	run(t, c, "echo kept > /workspace/f; echo lost > /root/g")
	vol := p.volumeName(cfg.Key)
	v, err := cli.VolumeInspect(ctx, vol)
	if err != nil || v.Labels[LabelOwner] != p.Owner() || v.Labels[LabelKey] != cfg.Key {
		t.Fatalf("volume %s: %+v, %v", vol, v.Labels, err)
	}
	if err := cli.ContainerRemove(ctx, containerName(first.ID), container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		t.Fatal(err)
	}
	second, c2 := create(t, p, cfg)
	if !second.WorkspaceKept {
		t.Fatal("a sandbox on an existing volume does not say it kept the workspace")
	}
	if res := run(t, c2, "cat /workspace/f; cat /root/g 2>/dev/null || echo none"); stdout(res) != "kept\nnone\n" {
		t.Fatalf("second sandbox: %q; want the workspace file kept and the other one gone", stdout(res))
	}
	if err := p.Kill(ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.VolumeInspect(ctx, vol); err == nil {
		t.Fatal("Kill left the workspace volume")
	}
	// An anonymous sandbox has no volume.
	anon, _ := create(t, p, manage.SandboxConfig{Key: "anon"})
	ci, err := cli.ContainerInspect(ctx, containerName(anon.ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ci.Mounts {
		if m.Type == "volume" {
			t.Fatalf("anonymous sandbox mounts volume %s", m.Name)
		}
	}
}

// The tcp transport: envd on a port published on 127.0.0.1 only, with a
// token the provider made; requests without it or with a wrong one are
// refused; processes do not see it; the sandbox has no route out and says
// what its network is.
func TestTCPTransport(t *testing.T) {
	p := newProvider(t, func(c *Config) { c.Transport = TransportTCP })
	cli := dockertest.Engine(t)
	ctx := t.Context()
	sb, c := create(t, p, manage.SandboxConfig{Key: "tcp"})
	if res := run(t, c, "echo hi; env | grep -c ACCESS_TOKEN; ls /sys/class/net | sort | tr '\\n' ' '"); !strings.HasPrefix(stdout(res), "hi\n0\n") {
		t.Fatalf("run over tcp: %q; want hi and no token in the environment", stdout(res))
	}
	ep, err := p.Endpoint(ctx, sb.ID)
	if err != nil || !strings.HasPrefix(ep.URL, "http://127.0.0.1:") || len(ep.AccessToken) != 64 {
		t.Fatalf("Endpoint = %+v, %v", ep, err)
	}
	ci, err := cli.ContainerInspect(ctx, containerName(sb.ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range ci.NetworkSettings.Ports[envdPortKey] {
		if b.HostIP != "127.0.0.1" {
			t.Errorf("envd's port is published on %q", b.HostIP)
		}
	}
	if string(ci.HostConfig.NetworkMode) != noNATNetwork {
		t.Errorf("network mode %q, want %s", ci.HostConfig.NetworkMode, noNATNetwork)
	}
	if slices.ContainsFunc(ci.Config.Entrypoint, func(s string) bool { return strings.Contains(s, ep.AccessToken) }) {
		t.Error("the token is in envd's command line (which every host user can read in /proc)")
	}
	nets, err := cli.NetworkInspect(ctx, noNATNetwork, network.InspectOptions{})
	if err != nil || nets.Options["com.docker.network.bridge.enable_ip_masquerade"] != "false" || nets.Options["com.docker.network.bridge.enable_icc"] != "false" {
		t.Fatalf("network %s: %+v, %v", noNATNetwork, nets.Options, err)
	}
	if info, _ := p.Info(ctx, sb.ID); !slices.ContainsFunc(info.Warnings, func(w string) bool { return strings.Contains(w, "without NAT") }) {
		t.Errorf("warnings %q do not say what the network is", info.Warnings)
	}

	// The attack: any local user can connect to a loopback port.
	for name, token := range map[string]string{"no token": "", "wrong token": strings.Repeat("0", 64), "token prefix": ep.AccessToken[:32]} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ep.URL+"/files?path=/etc/passwd", nil)
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: GET /files = %d, want 401", name, resp.StatusCode)
		}
		bad, err := envdclient.New(ep.URL, envdclient.WithAccessToken(token))
		if err != nil {
			t.Fatal(err)
		}
		_, err = bad.Run(ctx, envdclient.Command{Cmd: "true"}, envdclient.RunOptions{})
		bad.Close()
		if err == nil {
			t.Errorf("%s: a process started", name)
		}
	}

	// Stopped and started again, it gets a new port and the same token.
	timeout := 0
	if err := cli.ContainerStop(ctx, containerName(sb.ID), container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if res := run(t, dial(t, p, sb.ID), "echo back"); stdout(res) != "back\n" {
		t.Fatalf("after a restart: %q", stdout(res))
	}
}

// --network: none by default, the engine's bridge when asked.
func TestNetworkOption(t *testing.T) {
	p := newProvider(t, nil)
	_, off := create(t, p, manage.SandboxConfig{Key: "off"})
	_, on := create(t, p, manage.SandboxConfig{Key: "on", Network: manage.NetworkPolicyOn()})
	if got := stdout(run(t, off, "ls /sys/class/net | tr '\\n' ' '")); got != "lo " {
		t.Errorf("network off: interfaces %q", got)
	}
	if got := stdout(run(t, on, "ls /sys/class/net | tr '\\n' ' '")); !strings.Contains(got, "eth0") {
		t.Errorf("network on: interfaces %q", got)
	}
}

// An allow list is refused, not silently treated as on or off: the docker
// provider has no egress proxy yet.
func TestNetworkAllowRefused(t *testing.T) {
	p := newProvider(t, nil)
	policy, err := manage.ParseNetworkPolicy("allow=pypi.org")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Create(context.Background(), manage.SandboxConfig{Key: "allow", Network: policy})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "does not support --network allow=pypi.org") {
		t.Fatalf("Create: %v; want InvalidArgument naming the policy", err)
	}
}

// A disk limit is enforced where the storage driver can, and otherwise the
// sandbox says it is not (this machine's driver is reported in the log).
func TestDiskLimit(t *testing.T) {
	p := newProvider(t, func(c *Config) { c.DiskBytes = 64 << 20 })
	_, ok, why := p.DiskLimit()
	t.Logf("storage driver %s: disk limit enforced: %v %s", p.driver, ok, why)
	sb, c := create(t, p, manage.SandboxConfig{Key: "disk"})
	_, ok, _ = p.DiskLimit() // Create may have learnt that the engine refuses it
	warned := slices.ContainsFunc(sb.Warnings, func(w string) bool { return strings.Contains(w, "disk limit") })
	if ok == warned {
		t.Fatalf("enforced %v, warnings %q", ok, sb.Warnings)
	}
	if ok {
		res := run(t, c, "dd if=/dev/zero of=/workspace/big bs=1M count=128 2>&1; echo exit=$?")
		if strings.Contains(stdout(res), "exit=0") {
			t.Fatalf("wrote 128 MiB under a 64 MiB limit: %q", stdout(res))
		}
	}
}

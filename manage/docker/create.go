package docker

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/go-connections/nat"

	envd "github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Create makes and starts a container for cfg and returns once its envd
// listens and the socket is linked.
func (p *Provider) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
	if cfg.Network.IsAllow() {
		return manage.Sandbox{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"the docker provider does not support --network %s yet: use --network on or off, or the local provider (bwrap), which filters egress through a proxy", cfg.Network))
	}
	if err := cfg.Network.Check(); err != nil {
		return manage.Sandbox{}, connect.NewError(connect.CodeInvalidArgument, err)
	}
	image := cfg.Template
	if image == "" {
		image = p.image
	}
	if _, err := p.cli.ImageInspect(ctx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return manage.Sandbox{}, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"docker image %q is not on the docker engine, and the docker provider never pulls: run `docker pull %s` (or build or import it) first", image, image))
		}
		return manage.Sandbox{}, engineError("inspect image "+image, err)
	}
	if _, err := os.Stat(p.envd); err != nil {
		return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("envd binary: %w", err))
	}
	id := newID()
	unlock := p.lock(id)
	defer unlock()
	dir := p.sandboxDir(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	ok := false
	var newVolume string // a volume this Create made, removed if it fails
	defer func() {
		if !ok {
			// Detached: a cancelled create still removes what it made.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = p.cli.ContainerRemove(rctx, containerName(id), container.RemoveOptions{Force: true, RemoveVolumes: true})
			if newVolume != "" {
				_ = p.removeVolume(rctx, newVolume)
			}
			cancel()
			_ = os.RemoveAll(dir)
		}
	}()
	s := spec{id: id, image: image, cfg: cfg, created: time.Now().UTC().Truncate(time.Second), transport: p.transport}
	if s.transport == TransportSocket {
		// The container's user must be able to create the socket, whoever
		// it is; the sandbox directory above keeps host users out.
		if err := makeRunDir(dir); err != nil {
			return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
		}
	} else {
		s.token = newToken()
		if err := p.writeRecord(id, tokenFile, s.token); err != nil {
			return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
		}
		net, err := p.ensureNoNATNetwork(ctx)
		if err != nil && !cfg.Network.IsOn() {
			return manage.Sandbox{}, err
		}
		s.noNATNetwork = net
	}
	if cfg.Named {
		name, reused, err := p.ensureVolume(ctx, cfg.Key)
		if err != nil {
			return manage.Sandbox{}, err
		}
		if !reused {
			newVolume = name
		}
		s.volume, s.volumeReused = name, reused
		if err := p.writeRecord(id, volumeFile, name); err != nil {
			return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
		}
	}
	s.disk = p.disk > 0 && p.diskOK
	resp, err := p.containerCreate(ctx, s)
	if err != nil && s.disk && isStorageOptRefusal(err) {
		// overlay2 on xfs without pquota: the engine says so only now.
		p.diskOK, p.diskWhy = false, "the engine refused the disk limit ("+trimLines(err.Error(), 1)+"): overlay2 on xfs needs the pquota mount option"
		p.log.Warn("docker provider: the disk limit cannot be enforced", "reason", p.diskWhy)
		s.disk = false
		resp, err = p.containerCreate(ctx, s)
	}
	if err != nil {
		return manage.Sandbox{}, engineError("create sandbox container from image "+image, err)
	}
	if err := p.writeRecord(id, containerFile, resp.ID); err != nil {
		return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	if err := p.start(ctx, id); err != nil {
		return manage.Sandbox{}, err
	}
	ok = true
	cc, _ := p.containerConfig(s)
	sb := manage.Sandbox{
		ID: id, Provider: Name, State: manage.StateRunning, Detail: "running", CreatedAt: s.created,
		Isolation: Isolation, Workdir: insideWorkspace, EnvdVersion: envd.Version,
		Warnings: p.warnings(cc.Labels), WorkspaceKept: s.volumeReused,
	}
	p.log.Debug("docker sandbox created", "id", id, "image", image, "key", cfg.Key)
	return sb, nil
}

// spec is what Create decided about a sandbox's container.
type spec struct {
	id, image    string
	cfg          manage.SandboxConfig
	created      time.Time
	transport    Transport
	token        string // envd's access token (tcp)
	noNATNetwork string // the network of a sandbox without network (tcp)
	volume       string // the named workspace's volume, mounted at /workspace
	volumeReused bool
	disk         bool // cap the writable layer at p.disk
}

// containerCreate creates the container of s.
func (p *Provider) containerCreate(ctx context.Context, s spec) (container.CreateResponse, error) {
	cc, hc := p.containerConfig(s)
	return p.cli.ContainerCreate(ctx, cc, hc, nil, nil, containerName(s.id))
}

// isStorageOptRefusal reports an engine's refusal of --storage-opt size.
func isStorageOptRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "storage-opt") || strings.Contains(msg, "pquota") || strings.Contains(msg, "Storage Opt")
}

// envdPort is envd's TCP port in the container (the tcp transport): E2B's.
const envdPort = "49983"

// envdPortKey is envdPort in the engine's port-map notation.
const envdPortKey = envdPort + "/tcp"

// containerConfig is the container of s.
func (p *Provider) containerConfig(s spec) (*container.Config, *container.HostConfig) {
	cfg := s.cfg
	lim := cfg.Limits
	lim = lim.Or(p.limits)
	listen := "unix:" + insideSocket
	if s.transport == TransportTCP {
		listen = "0.0.0.0:" + envdPort
	}
	entry := []string{insideEnvd, "envd", "--listen", listen, "--root", insideWorkspace, "--ready-fd", "1"}
	env := map[string]string{"LANG": "C.UTF-8", "TMPDIR": "/tmp"}
	for k, v := range cfg.Env {
		env[k] = v
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		entry = append(entry, "--env", k+"="+env[k])
	}
	cc := &container.Config{
		Image:        s.image,
		User:         p.user,
		Entrypoint:   entry,
		Cmd:          []string{},
		WorkingDir:   insideWorkspace,
		Env:          []string{"HOME=" + insideWorkspace},
		AttachStdout: true,
		AttachStderr: true,
		Labels: map[string]string{
			LabelProvider:   Name,
			LabelID:         s.id,
			LabelOwner:      p.owner,
			LabelKey:        cfg.Key,
			LabelNamed:      strconv.FormatBool(cfg.Named),
			LabelGeneration: strconv.FormatInt(cfg.Generation, 10),
			LabelCreated:    s.created.Format(time.RFC3339),
			LabelEnvd:       envd.Version,
			LabelTransport:  string(s.transport),
			LabelNetwork:    strconv.FormatBool(cfg.Network.IsOn()),
		},
	}
	if p.disk > 0 {
		cc.Labels[LabelDisk] = map[bool]string{true: "enforced", false: "unenforced"}[s.disk]
	}
	network := container.NetworkMode("none")
	if cfg.Network.IsOn() {
		network = "bridge"
	}
	mounts := []mount.Mount{{Type: mount.TypeBind, Source: p.envd, Target: insideEnvd, ReadOnly: true}}
	if s.transport == TransportSocket {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: filepath.Join(p.sandboxDir(s.id), runDir), Target: insideRun})
	}
	if s.volume != "" {
		mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: s.volume, Target: insideWorkspace})
	}
	init := true
	hc := &container.HostConfig{
		NetworkMode: network,
		Init:        &init,
		Mounts:      mounts,
		SecurityOpt: []string{"no-new-privileges"},
		LogConfig:   container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "2"}},
		Resources: container.Resources{
			Memory:     lim.MemoryBytes,
			MemorySwap: lim.MemoryBytes, // no swap beyond the memory limit
			NanoCPUs:   int64(lim.CPUs * 1e9),
			PidsLimit:  &lim.Pids,
		},
	}
	if s.transport == TransportTCP {
		// envd's port, on the host's loopback only, at a port the engine
		// picks; the token (in the daemon's environment, which /proc shows
		// only to root, not in its command line) guards it.
		cc.Env = append(cc.Env, "SANDBOX_MCP_ACCESS_TOKEN="+s.token)
		cc.ExposedPorts = nat.PortSet{envdPortKey: struct{}{}}
		hc.PortBindings = nat.PortMap{envdPortKey: []nat.PortBinding{{HostIP: "127.0.0.1", HostPort: ""}}}
		if !cfg.Network.IsOn() {
			// Network mode none publishes no port: a bridge without NAT.
			hc.NetworkMode = container.NetworkMode(s.noNATNetwork)
		}
	}
	if s.disk {
		hc.StorageOpt = map[string]string{"size": strconv.FormatInt(p.disk, 10)}
	}
	if lim.NoFile > 0 {
		hc.Ulimits = []*container.Ulimit{{Name: "nofile", Soft: int64(lim.NoFile), Hard: int64(lim.NoFile)}}
	}
	return cc, hc
}

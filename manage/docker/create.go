//go:build linux

package docker

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	envd "github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Create makes and starts a container for cfg and returns once its envd
// listens and the socket is linked.
func (p *Provider) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
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
	// The container's user must be able to create the socket, whoever it
	// is; the sandbox directory above keeps host users out.
	if err := makeRunDir(dir); err != nil {
		_ = os.RemoveAll(dir)
		return manage.Sandbox{}, connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
	}
	created := time.Now().UTC().Truncate(time.Second)
	cc, hc := p.containerConfig(id, image, cfg, created)
	ok := false
	defer func() {
		if !ok {
			// Detached: a cancelled create still removes what it made.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = p.cli.ContainerRemove(rctx, containerName(id), container.RemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
			_ = os.RemoveAll(dir)
		}
	}()
	if _, err := p.cli.ContainerCreate(ctx, cc, hc, nil, nil, containerName(id)); err != nil {
		return manage.Sandbox{}, engineError("create sandbox container from image "+image, err)
	}
	if err := p.start(ctx, id); err != nil {
		return manage.Sandbox{}, err
	}
	ok = true
	sb := manage.Sandbox{
		ID: id, Provider: Name, State: manage.StateRunning, Detail: "running", CreatedAt: created,
		Isolation: Isolation, Workdir: insideWorkspace, EnvdVersion: envd.Version,
	}
	p.log.Debug("docker sandbox created", "id", id, "image", image, "key", cfg.Key)
	return sb, nil
}

// containerConfig is the container of sandbox id.
func (p *Provider) containerConfig(id, image string, cfg manage.SandboxConfig, created time.Time) (*container.Config, *container.HostConfig) {
	lim := cfg.Limits
	lim = lim.Or(p.limits)
	entry := []string{insideEnvd, "envd", "--listen", "unix:" + insideSocket, "--root", insideWorkspace, "--ready-fd", "1"}
	env := map[string]string{"LANG": "C.UTF-8", "TMPDIR": "/tmp"}
	for k, v := range cfg.Env {
		env[k] = v
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		entry = append(entry, "--env", k+"="+env[k])
	}
	cc := &container.Config{
		Image:        image,
		User:         p.user,
		Entrypoint:   entry,
		Cmd:          []string{},
		WorkingDir:   insideWorkspace,
		Env:          []string{"HOME=" + insideWorkspace},
		AttachStdout: true,
		AttachStderr: true,
		Labels: map[string]string{
			LabelProvider: Name,
			LabelID:       id,
			LabelOwner:    p.owner,
			LabelKey:      cfg.Key,
			LabelNamed:    strconv.FormatBool(cfg.Named),
			LabelCreated:  created.Format(time.RFC3339),
			LabelEnvd:     envd.Version,
		},
	}
	network := container.NetworkMode("none")
	if cfg.Network {
		network = "bridge"
	}
	init := true
	hc := &container.HostConfig{
		NetworkMode: network,
		Init:        &init,
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: p.envd, Target: insideEnvd, ReadOnly: true},
			{Type: mount.TypeBind, Source: filepath.Join(p.sandboxDir(id), "run"), Target: insideRun},
		},
		SecurityOpt: []string{"no-new-privileges"},
		LogConfig:   container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "2"}},
		Resources: container.Resources{
			Memory:     lim.MemoryBytes,
			MemorySwap: lim.MemoryBytes, // no swap beyond the memory limit
			NanoCPUs:   int64(lim.CPUs * 1e9),
			PidsLimit:  &lim.Pids,
		},
	}
	if lim.NoFile > 0 {
		hc.Ulimits = []*container.Ulimit{{Name: "nofile", Soft: int64(lim.NoFile), Hard: int64(lim.NoFile)}}
	}
	return cc, hc
}

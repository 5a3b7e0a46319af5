package docker

import (
	"context"
	"fmt"
	"os"

	"connectrpc.com/connect"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// Kill removes the container with its anonymous volumes, a named
// workspace's volume (its files go with the sandbox, as the local
// provider's do), and the sandbox's host directory. Killing a gone one is
// a no-op but for what is left of it (its volume, its directory). A
// container with the sandbox's name that the provider did not make is
// left alone.
func (p *Provider) Kill(ctx context.Context, id string) error {
	if !validID(id) {
		return nil
	}
	unlock := p.lock(id)
	defer unlock()
	if _, err := p.inspect(ctx, id); err != nil {
		if connect.CodeOf(err) != connect.CodeNotFound {
			return err
		}
	} else if err := p.cli.ContainerRemove(ctx, containerName(id), container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return engineError("kill sandbox "+id, err)
	}
	if vol := p.readRecord(id, volumeFile); vol != "" {
		if err := p.removeVolume(ctx, vol); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(p.sandboxDir(id)); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("kill sandbox %s: %w", id, err))
	}
	return nil
}

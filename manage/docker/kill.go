//go:build linux

package docker

import (
	"context"
	"fmt"
	"os"

	"connectrpc.com/connect"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// Kill removes the container with its anonymous volumes, and the sandbox's
// host directory. Killing a gone one is a no-op.
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
	if err := os.RemoveAll(p.sandboxDir(id)); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("kill sandbox %s: %w", id, err))
	}
	return nil
}

package docker

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Pause freezes the container (docker pause). Pausing a paused or stopped
// one is a no-op.
func (p *Provider) Pause(ctx context.Context, id string) error {
	unlock := p.lock(id)
	defer unlock()
	ci, err := p.inspect(ctx, id)
	if err != nil {
		return err
	}
	if ci.State.Paused || !ci.State.Running {
		return nil
	}
	if err := p.cli.ContainerPause(ctx, containerName(id)); err != nil {
		return engineError("pause sandbox "+id, err)
	}
	return nil
}

// Resume unpauses a paused container, or starts a stopped one (its files
// kept, its processes from before gone) and waits for its envd. Resuming a
// running one is a no-op.
func (p *Provider) Resume(ctx context.Context, id string) error {
	unlock := p.lock(id)
	defer unlock()
	ci, err := p.inspect(ctx, id)
	if err != nil {
		return err
	}
	switch state, detail := mapState(ci.State); state {
	case manage.StateRunning:
		return nil
	case manage.StatePaused:
		if err := p.cli.ContainerUnpause(ctx, containerName(id)); err != nil {
			return engineError("resume sandbox "+id, err)
		}
		return nil
	case manage.StateStopped:
		if err := makeRunDir(p.sandboxDir(id)); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %w", id, err))
		}
		return p.start(ctx, id)
	default:
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("sandbox %s: %s", id, detail))
	}
}

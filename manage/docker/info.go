package docker

import (
	"context"
	"fmt"
	"os"
	"time"

	"connectrpc.com/connect"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	envd "github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// inspect returns sandbox id's container, or a not-found error when there is
// none or it is not a sandbox-mcp container of that id.
func (p *Provider) inspect(ctx context.Context, id string) (container.InspectResponse, error) {
	if !validID(id) {
		return container.InspectResponse{}, notFound(id)
	}
	ci, err := p.cli.ContainerInspect(ctx, containerName(id))
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return ci, notFound(id)
		}
		return ci, engineError("inspect sandbox "+id, err)
	}
	if ci.Config == nil || ci.Config.Labels[LabelID] != id || ci.State == nil {
		return ci, notFound(id)
	}
	if want := p.readRecord(id, containerFile); want == "" || ci.ID != want {
		// Our name and labels, but not the container this provider made
		// (or none recorded): someone else's, never adopted.
		p.log.Warn("docker sandbox: a container has this sandbox's name and labels but is not the one the provider made; ignoring it", "id", id, "container", ci.ID)
		return ci, notFound(id)
	}
	return ci, nil
}

// Info reports the sandbox's state from the container's: running, paused,
// exited or created (stopped: its files are kept), or gone when there is no
// such container (removed, `docker rm -f`) or it is dead or being removed.
func (p *Provider) Info(ctx context.Context, id string) (manage.Sandbox, error) {
	ci, err := p.inspect(ctx, id)
	if err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return manage.Sandbox{ID: id, Provider: Name, State: manage.StateGone, Detail: "not found"}, nil
		}
		return manage.Sandbox{}, err
	}
	return p.describe(id, ci.Config.Labels, ci.State), nil
}

// describe turns a container's labels and state into a Sandbox.
func (p *Provider) describe(id string, labels map[string]string, st *container.State) manage.Sandbox {
	sb := manage.Sandbox{
		ID: id, Provider: Name, Isolation: Isolation, Workdir: insideWorkspace, EnvdVersion: labels[LabelEnvd],
	}
	sb.CreatedAt, _ = time.Parse(time.RFC3339, labels[LabelCreated])
	sb.State, sb.Detail = mapState(st)
	sb.Warnings = p.warnings(labels)
	if sb.State == manage.StateStopped || sb.State == manage.StateGone {
		if t, err := time.Parse(time.RFC3339Nano, st.FinishedAt); err == nil && !t.IsZero() && t.Year() > 1 {
			sb.EndedAt = t
		}
	}
	return sb
}

// mapState maps a container's state to a sandbox state and detail.
func mapState(st *container.State) (manage.State, string) {
	switch {
	case st.Paused:
		return manage.StatePaused, "paused"
	case st.Running, st.Restarting:
		return manage.StateRunning, "running"
	case st.Dead, st.Status == container.StateDead:
		return manage.StateGone, "container is dead"
	case st.Status == container.StateRemoving:
		return manage.StateGone, "container is being removed"
	case st.Status == container.StateCreated:
		return manage.StateStopped, "container created, never started"
	}
	detail := fmt.Sprintf("container exited with code %d", st.ExitCode)
	if st.OOMKilled {
		detail += " (killed: out of memory)"
	}
	if st.Error != "" {
		detail += ": " + st.Error
	}
	return manage.StateStopped, detail
}

// Endpoint returns the host-only link to the sandbox's envd socket (see the
// package comment), relinking it first when envd's socket changed since.
func (p *Provider) Endpoint(ctx context.Context, id string) (manage.Endpoint, error) {
	if !validID(id) {
		return manage.Endpoint{}, notFound(id)
	}
	if err := ctx.Err(); err != nil {
		return manage.Endpoint{}, engineError("sandbox "+id, err)
	}
	dir := p.sandboxDir(id)
	if _, err := os.Stat(dir); err != nil {
		return manage.Endpoint{}, notFound(id)
	}
	unlock := p.lock(id)
	defer unlock()
	if token := p.readRecord(id, tokenFile); token != "" {
		ci, err := p.inspect(ctx, id)
		if err != nil {
			return manage.Endpoint{}, err
		}
		addr, err := publishedPort(ci)
		if err != nil {
			return manage.Endpoint{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: %w", id, err))
		}
		return manage.Endpoint{URL: "http://" + addr, AccessToken: token, EnvdVersion: envd.Version}, nil
	}
	if err := refreshLink(dir); err != nil {
		if _, lerr := os.Lstat(socketPath(p.dir, id)); lerr != nil {
			return manage.Endpoint{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: %w", id, err))
		}
		// The link to envd's socket from before stays valid.
		p.log.Warn("docker sandbox: the socket in its run directory is unusable; keeping the link made before", "id", id, "error", err)
	}
	return manage.Endpoint{URL: "unix:" + socketPath(p.dir, id), EnvdVersion: envd.Version}, nil
}

// List returns the sandboxes of this provider's owner: containers with its
// owner label that it made (their engine id is the one it recorded).
func (p *Provider) List(ctx context.Context) ([]manage.Sandbox, error) {
	cs, err := p.ownContainers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]manage.Sandbox, 0, len(cs))
	for _, c := range cs {
		out = append(out, p.describeListed(c))
	}
	return out, nil
}

// ownContainers lists the containers with this provider's owner label that
// it made: their engine id is the one recorded for their sandbox id. Others
// (labels copied by someone else, or a container whose record is lost)
// are left out.
func (p *Provider) ownContainers(ctx context.Context) ([]container.Summary, error) {
	cs, err := p.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelOwner+"="+p.owner), filters.Arg("label", LabelProvider+"="+Name)),
	})
	if err != nil {
		return nil, engineError("list sandboxes", err)
	}
	out := cs[:0]
	for _, c := range cs {
		if id := c.Labels[LabelID]; validID(id) && c.ID == p.readRecord(id, containerFile) {
			out = append(out, c)
		}
	}
	return out, nil
}

// describeListed turns a container of ownContainers into a Sandbox.
func (p *Provider) describeListed(c container.Summary) manage.Sandbox {
	st := &container.State{Status: c.State}
	switch c.State {
	case container.StateRunning:
		st.Running = true
	case container.StatePaused:
		st.Running, st.Paused = true, true
	case container.StateRestarting:
		st.Restarting = true
	case container.StateDead:
		st.Dead = true
	}
	sb := p.describe(c.Labels[LabelID], c.Labels, st)
	if sb.State == manage.StateStopped {
		sb.Detail = c.Status
	}
	return sb
}

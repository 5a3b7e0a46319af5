package docker

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// ReapReport says what ReapUnowned removed.
type ReapReport struct {
	// Containers are the names of the containers removed.
	Containers []string
	// Volumes are the workspace volumes removed.
	Volumes []string
	// Dirs are the sandbox host directories removed.
	Dirs []string
}

// ReapOptions tune ReapUnowned.
type ReapOptions struct {
	// MinAge spares what is younger: a server sharing the store may have
	// made it and not recorded it yet. Default (0): DefaultReapMinAge; a
	// negative value spares nothing.
	MinAge time.Duration
}

// DefaultReapMinAge is ReapOptions.MinAge's default: longer than any
// create (the Manager's create timeout is 2 minutes).
const DefaultReapMinAge = 5 * time.Minute

// ReapUnowned removes what this provider's owner left behind that no
// record of store owns, for a server starting up: containers with its
// owner label whose sandbox no live record names, or that are not the
// container the provider made for that sandbox (labels copied by someone
// else); workspace volumes of keys the store has no record of; and host
// directories of sandboxes no record names. A record owns a sandbox when
// it is the docker provider's and not gone.
//
// A store that replaced a damaged file (manage.DamageReporter) has lost
// records, so it cannot judge ownership: until the Manager has rebuilt them
// from the containers (Rediscover), every container this provider made is
// spared, and so are all volumes and host directories; only containers it
// did not make (whose engine id is not the recorded one) are removed.
func (p *Provider) ReapUnowned(ctx context.Context, store manage.Store, opts ReapOptions) (ReapReport, error) {
	minAge := opts.MinAge
	if minAge == 0 {
		minAge = DefaultReapMinAge
	}
	cutoff := time.Now().Add(-minAge)
	dr, ok := store.(manage.DamageReporter)
	damaged := ok && dr.Damages() > 0
	if damaged {
		p.log.Warn("the store file was damaged and replaced: sparing every docker sandbox, volume and directory this server made until the store is rebuilt from them")
	}
	recs, err := store.List(ctx)
	if err != nil {
		return ReapReport{}, err
	}
	owned, keys := map[string]bool{}, map[string]bool{}
	for _, r := range recs {
		keys[r.Key] = true
		if r.Provider == Name && r.SandboxID != "" && r.State != manage.StateGone {
			owned[r.SandboxID] = true
		}
	}
	var rep ReapReport
	var errs []error
	cs, err := p.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelOwner+"="+p.owner), filters.Arg("label", LabelProvider+"="+Name)),
	})
	if err != nil {
		return rep, engineError("list sandboxes", err)
	}
	for _, c := range cs {
		id := c.Labels[LabelID]
		made := c.ID == p.readRecord(id, containerFile)
		if made && (owned[id] || damaged) {
			continue
		}
		if time.Unix(c.Created, 0).After(cutoff) {
			continue
		}
		if err := p.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			errs = append(errs, engineError("remove unowned container "+c.ID, err))
			continue
		}
		name := c.ID
		if len(c.Names) > 0 {
			name = c.Names[0]
		}
		rep.Containers = append(rep.Containers, name)
		p.log.Info("removed a docker container with this server's labels that no workspace owns", "container", name, "sandbox", id)
	}
	if damaged {
		return rep, errors.Join(errs...)
	}
	vols, err := p.ownVolumes(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for name, key := range vols {
		if keys[key] {
			continue
		}
		if err := p.removeVolume(ctx, name); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Volumes = append(rep.Volumes, name)
		p.log.Info("removed a workspace volume no workspace owns", "volume", name, "key", key)
	}
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || !validID(id) || owned[id] {
			continue
		}
		if fi, err := e.Info(); err != nil || fi.ModTime().After(cutoff) {
			continue
		}
		if err := os.RemoveAll(p.sandboxDir(id)); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Dirs = append(rep.Dirs, id)
	}
	return rep, errors.Join(errs...)
}

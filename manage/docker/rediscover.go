package docker

import (
	"context"
	"strconv"

	"github.com/docker/docker/api/types/container"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

var _ manage.Rediscoverer = (*Provider)(nil)

// Rediscover implements manage.Rediscoverer: each container this provider
// made (ownContainers: its engine id is the one recorded in the sandbox's
// host directory, so its labels are the ones Create set, which the engine
// never changes) names its workspace key, whether the workspace is named
// and its generation in its labels. A named workspace's volume record must
// be that key's volume. A container that lacks one of them (made before
// LabelGeneration existed) is returned with an empty Key, logged, and left
// in place; so is one of a key that has a newer generation here (a kill
// that never finished). Containers this provider did not make are not
// returned at all.
func (p *Provider) Rediscover(ctx context.Context) ([]manage.Rediscovered, error) {
	cs, err := p.ownContainers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]manage.Rediscovered, 0, len(cs))
	for _, c := range cs {
		r := manage.Rediscovered{Sandbox: p.describeListed(c)}
		if key, named, gen, why := p.attribution(c); why != "" {
			p.log.Warn("docker sandbox cannot be attributed to a workspace while rebuilding the store; left in place", "id", r.Sandbox.ID, "container", c.ID, "reason", why)
		} else {
			r.Key, r.Named, r.Generation = key, named, gen
		}
		out = append(out, r)
	}
	for _, old := range manage.KeepNewestGeneration(out) {
		p.log.Warn("docker sandbox is an older sandbox of a workspace that has a newer one; left in place, unattributed", "id", old.Sandbox.ID, "generation", old.Generation)
	}
	return out, nil
}

// attribution returns the workspace of container c from its labels, or why
// it cannot tell.
func (p *Provider) attribution(c container.Summary) (key string, named bool, gen int64, why string) {
	key = c.Labels[LabelKey]
	if key == "" {
		return "", false, 0, "no " + LabelKey + " label"
	}
	named, err := strconv.ParseBool(c.Labels[LabelNamed])
	if err != nil {
		return "", false, 0, "no valid " + LabelNamed + " label"
	}
	gen, err = strconv.ParseInt(c.Labels[LabelGeneration], 10, 64)
	if err != nil || gen < 1 {
		return "", false, 0, "no valid " + LabelGeneration + " label (made by an older version)"
	}
	if vol := p.readRecord(c.Labels[LabelID], volumeFile); named && vol != p.volumeName(key) {
		return "", false, 0, "its volume record " + strconv.Quote(vol) + " is not its key's volume"
	}
	return key, named, gen, ""
}

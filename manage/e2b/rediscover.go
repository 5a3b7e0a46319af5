package e2b

import (
	"context"
	"strconv"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

var _ manage.Rediscoverer = (*Provider)(nil)

// Rediscover implements manage.Rediscoverer: the sandboxes, running and
// paused, whose metadata marks them as this provider's (MetaProvider) and
// this owner's (MetaOwner) name their workspace key, whether it is named
// and their generation in the metadata Create set. One whose metadata
// lacks one of them, whose state this version does not know, or that is
// an older sandbox of a key that has a newer one here (a kill that never
// finished) is returned with an empty Key, logged, and left in place.
// Sandboxes of other owners are not returned.
func (p *Provider) Rediscover(ctx context.Context) ([]manage.Rediscovered, error) {
	all, err := p.api.List(ctx, ListOptions{Metadata: map[string]string{MetaOwner: p.owner, MetaProvider: Name}})
	if err != nil {
		return nil, err
	}
	out := make([]manage.Rediscovered, 0, len(all))
	for _, s := range all {
		if s.Metadata[MetaOwner] != p.owner || s.Metadata[MetaProvider] != Name {
			continue
		}
		r := manage.Rediscovered{Sandbox: p.describe(s)}
		if key, named, gen, why := attribution(s); why != "" {
			p.log.Warn("e2b sandbox cannot be attributed to a workspace while rebuilding the store; left in place", "id", s.SandboxID, "reason", why)
		} else if r.Sandbox.State == "" {
			p.log.Warn("e2b sandbox is in a state this version does not know; left in place while rebuilding the store", "id", s.SandboxID, "state", s.State)
		} else {
			r.Key, r.Named, r.Generation = key, named, gen
		}
		out = append(out, r)
	}
	for _, old := range manage.KeepNewestGeneration(out) {
		p.log.Warn("e2b sandbox is an older sandbox of a workspace that has a newer one; left in place, unattributed", "id", old.Sandbox.ID, "generation", old.Generation)
	}
	return out, nil
}

// attribution returns the workspace of sandbox s from its metadata, or why
// it cannot tell.
func attribution(s e2bapi.ListedSandbox) (key string, named bool, gen int64, why string) {
	key = s.Metadata[MetaKey]
	if key == "" {
		return "", false, 0, "no " + MetaKey + " metadata"
	}
	named, err := strconv.ParseBool(s.Metadata[MetaNamed])
	if err != nil {
		return "", false, 0, "no valid " + MetaNamed + " metadata"
	}
	gen, err = strconv.ParseInt(s.Metadata[MetaGeneration], 10, 64)
	if err != nil || gen < 1 {
		return "", false, 0, "no valid " + MetaGeneration + " metadata"
	}
	return key, named, gen, ""
}

package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
)

// volumePrefix starts the name of a named workspace's volume.
const volumePrefix = "sandbox-mcp-ws-"

// volumeName is the volume of workspace key of this provider's owner: the
// same for every sandbox of that key, so a replacement finds its files.
func (p *Provider) volumeName(key string) string {
	sum := sha256.Sum256([]byte(p.owner + "\x00" + key))
	return volumePrefix + hex.EncodeToString(sum[:])[:20]
}

// ensureVolume returns key's workspace volume, creating it when there is
// none; reused says it existed (it holds the files of an earlier sandbox
// of the key).
func (p *Provider) ensureVolume(ctx context.Context, key string) (name string, reused bool, err error) {
	name = p.volumeName(key)
	v, err := p.cli.VolumeInspect(ctx, name)
	if err == nil && v.Labels[LabelOwner] == p.owner {
		return name, true, nil
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return "", false, engineError("inspect workspace volume "+name, err)
	}
	if err == nil {
		// A volume of that name that is not ours: leave it, and refuse.
		return "", false, engineError("workspace volume "+name, errForeignVolume)
	}
	_, err = p.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: map[string]string{
		LabelProvider: Name, LabelOwner: p.owner, LabelKey: key, LabelNamed: strconv.FormatBool(true),
	}})
	if err != nil {
		return "", false, engineError("create workspace volume "+name, err)
	}
	return name, false, nil
}

// removeVolume removes a workspace volume of this provider; a missing one
// is no error.
func (p *Provider) removeVolume(ctx context.Context, name string) error {
	if err := p.cli.VolumeRemove(ctx, name, true); err != nil && !cerrdefs.IsNotFound(err) {
		return engineError("remove workspace volume "+name, err)
	}
	return nil
}

// ownVolumes lists this owner's workspace volumes, by name, with their key.
func (p *Provider) ownVolumes(ctx context.Context) (map[string]string, error) {
	resp, err := p.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelOwner+"="+p.owner), filters.Arg("label", LabelProvider+"="+Name))})
	if err != nil {
		return nil, engineError("list workspace volumes", err)
	}
	out := map[string]string{}
	for _, v := range resp.Volumes {
		out[v.Name] = v.Labels[LabelKey]
	}
	return out, nil
}

//go:build linux

package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

var _ manage.Rediscoverer = (*Provider)(nil)

// Rediscover implements manage.Rediscoverer: each sandbox directory's
// sandbox.json names the workspace key it was made for (and so its
// principal), whether the workspace is named, and its generation at
// creation. A directory whose sandbox.json cannot be read, or names no key,
// is returned with an empty Key: it is not attributed, and the Manager
// leaves it in place.
func (p *Provider) Rediscover(ctx context.Context) ([]manage.Rediscovered, error) {
	entries, err := os.ReadDir(p.sandboxesDir)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list sandboxes: %w", err))
	}
	var out []manage.Rediscovered
	for _, de := range entries {
		if !de.IsDir() || !validID(de.Name()) {
			continue
		}
		dir := filepath.Join(p.sandboxesDir, de.Name())
		s, vanished, err := p.info(ctx, de.Name())
		if err != nil {
			return nil, err
		}
		if vanished {
			continue
		}
		r := manage.Rediscovered{Sandbox: s}
		if meta, err := readMeta(dir); err == nil && meta.ID == de.Name() {
			r.Key, r.Named, r.Generation = meta.Config.Key, meta.Config.Named, meta.Config.Generation
		}
		out = append(out, r)
	}
	return out, nil
}

package docker

import (
	"context"
	"time"

	"github.com/docker/docker/client"
)

// Ping reports whether an engine answers at host (ResolveHost's choice
// when ""), within timeout.
func Ping(ctx context.Context, host string, timeout time.Duration) error {
	cli, err := client.NewClientWithOpts(client.WithHost(ResolveHost(host)), client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = cli.Ping(pctx)
	return err
}

package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"

	"connectrpc.com/connect"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
)

// noNATNetwork is the network of tcp-transport sandboxes without network:
// network mode none publishes no port, so they sit on a bridge with no
// NAT to the outside (no masquerade) and no traffic between containers
// (icc off). The host (on Docker Desktop, its VM) stays reachable at the
// bridge's gateway address: Sandbox.Warnings says so.
const noNATNetwork = "sandbox-mcp-nonat"

// ensureNoNATNetwork returns noNATNetwork, creating it when missing.
func (p *Provider) ensureNoNATNetwork(ctx context.Context) (string, error) {
	list, err := p.cli.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", noNATNetwork))})
	if err != nil {
		return "", engineError("list networks", err)
	}
	for _, n := range list {
		if n.Name == noNATNetwork {
			if n.Options["com.docker.network.bridge.enable_ip_masquerade"] != "false" || n.Options["com.docker.network.bridge.enable_icc"] != "false" {
				return "", connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
					"docker network %s exists but allows NAT or traffic between containers; remove it (docker network rm %s) and the provider makes it again", noNATNetwork, noNATNetwork))
			}
			return noNATNetwork, nil
		}
	}
	_, err = p.cli.NetworkCreate(ctx, noNATNetwork, network.CreateOptions{
		Driver: "bridge",
		Options: map[string]string{
			"com.docker.network.bridge.enable_ip_masquerade": "false",
			"com.docker.network.bridge.enable_icc":           "false",
		},
		Labels: map[string]string{LabelProvider: Name},
	})
	if err != nil && !cerrdefs.IsConflict(err) {
		return "", engineError("create network "+noNATNetwork, err)
	}
	return noNATNetwork, nil
}

// newToken returns a fresh access token: 32 random bytes in hex.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// publishedPort returns the host address of envd's port from a
// container's inspection: on 127.0.0.1 only, or an error.
func publishedPort(ci container.InspectResponse) (string, error) {
	if ci.NetworkSettings == nil {
		return "", fmt.Errorf("no network settings")
	}
	for _, b := range ci.NetworkSettings.Ports[envdPortKey] {
		if b.HostIP == "127.0.0.1" && b.HostPort != "" {
			return net.JoinHostPort("127.0.0.1", b.HostPort), nil
		}
	}
	return "", fmt.Errorf("envd's port %s is not published on 127.0.0.1", envdPortKey)
}

// warnings are what a sandbox with labels must tell its user.
func (p *Provider) warnings(labels map[string]string) []string {
	var w []string
	if labels[LabelDisk] == "unenforced" {
		why := p.diskWhy
		if why == "" {
			why = "the engine's storage driver cannot cap a container's disk"
		}
		w = append(w, fmt.Sprintf("The disk limit of %d MiB is not enforced: %s.", p.disk>>20, why))
	}
	if labels[LabelTransport] == string(TransportTCP) && labels[LabelNetwork] != "true" {
		w = append(w, "Network access is off only in part: this sandbox is reached through a published port, so it sits on a bridge without NAT (no internet, no other containers), but the docker host stays reachable at the bridge's gateway address.")
	}
	return w
}

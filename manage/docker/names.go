package docker

import "fmt"

// The provider's names and defaults, which the server's flags name.

// Name is the provider's name.
const Name = "docker"

// Isolation is what Sandbox.Isolation says of a docker sandbox.
const Isolation = "docker"

// DefaultImage is the image sandboxes run when neither Config.Image nor the
// sandbox's Template names one: Debian's slim image (about 75 MB), which has
// a shell and apt. It must be on the engine already (docker pull it once):
// the provider never pulls.
const DefaultImage = "debian:bookworm-slim"

// Transport says how the server reaches envd in a docker sandbox.
type Transport string

// The transports.
const (
	// TransportSocket: envd listens on a unix socket in a host directory
	// bind-mounted into the container, which the server hard-links into a
	// directory the container cannot see. It needs the engine on this
	// machine's kernel (Linux), and keeps the container's network off.
	TransportSocket Transport = "socket"
	// TransportTCP: envd listens on a TCP port in the container, published
	// on the host's 127.0.0.1 only at a port the engine picks, and refuses
	// requests without the access token the server made for that container
	// (X-Access-Token). It is what works where unix sockets cannot cross
	// the boundary between host and engine (Docker Desktop's VM on macOS
	// and Windows).
	TransportTCP Transport = "tcp"
)

// DefaultTransport is the transport for a server on goos: the socket on
// Linux, TCP elsewhere.
func DefaultTransport(goos string) Transport {
	if goos == "linux" {
		return TransportSocket
	}
	return TransportTCP
}

// ParseTransport returns the transport s names ("socket" or "tcp"), or
// DefaultTransport(goos) for "" and "auto".
func ParseTransport(s, goos string) (Transport, error) {
	switch Transport(s) {
	case "", "auto":
		return DefaultTransport(goos), nil
	case TransportSocket, TransportTCP:
		return Transport(s), nil
	}
	return "", fmt.Errorf("docker transport %q: want auto, socket or tcp", s)
}

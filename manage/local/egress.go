//go:build linux

package local

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/egress"
)

// A sandbox with an allow-list network policy keeps its own empty network
// namespace and reaches the network only through its filtering proxy
// (package manage/egress), which the server runs while the sandbox's daemon
// runs. The proxy listens on <sandbox dir>/egress/proxy.sock: the server
// makes the directory (its own, 0755) and the socket, and binds the
// directory read-only at /.sandbox-mcp/egress, so nothing in the sandbox
// can replace the socket, and the server only listens there, never dials.
// Inside, envd forwards 127.0.0.1:3128 to the socket (--proxy-forward) and
// gives every process HTTP_PROXY, HTTPS_PROXY and ALL_PROXY pointing there.
const (
	egressDir        = "egress"
	egressSocketName = "proxy.sock"
	insideEgress     = "/.sandbox-mcp/egress"
	// insideProxyAddr is where the proxy is reached inside a sandbox.
	insideProxyAddr = "127.0.0.1:3128"
)

// networkSpec resolves a network policy for a sandbox: whether it shares
// the host's network (on), and the allow policy its proxy enforces (the
// zero policy otherwise). An allow policy needs bwrap: without a network
// namespace nothing would keep a process from going around the proxy.
func (p *Provider) networkSpec(policy manage.NetworkPolicy) (shared bool, allow manage.NetworkPolicy, err error) {
	if err := policy.Check(); err != nil {
		return false, manage.NetworkPolicy{}, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if !policy.IsAllow() {
		return policy.IsOn(), manage.NetworkPolicy{}, nil
	}
	if p.isolation != IsolationBwrap {
		return false, manage.NetworkPolicy{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"--network %s needs bwrap isolation: an unisolated sandbox shares the host's network, so no proxy could restrict it", policy))
	}
	return false, policy, nil
}

// noProxyFor is NO_PROXY under policy: the sandbox's own loopback names
// (localhost, 127.0.0.1, ::1), except those the allow list names, which
// mean the host's and so must go through the proxy.
func noProxyFor(policy manage.NetworkPolicy) string {
	var keep []string
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		if !slices.ContainsFunc(policy.Allow, func(h manage.HostPort) bool { return h.Host == name }) {
			keep = append(keep, name)
		}
	}
	return strings.Join(keep, ",")
}

// egressBwrapArgs are the bwrap options that bind the proxy's directory
// read-only into a sandbox with an allow policy (none otherwise).
func egressBwrapArgs(dir string, spec sandboxSpec) []string {
	if !spec.egress.IsAllow() {
		return nil
	}
	return []string{"--ro-bind", filepath.Join(dir, egressDir), insideEgress}
}

// egressEnvdArgs are envd's options that forward insideProxyAddr to the
// proxy and set the proxy variables (none without an allow policy).
func egressEnvdArgs(spec sandboxSpec) []string {
	if !spec.egress.IsAllow() {
		return nil
	}
	args := []string{"--proxy-forward", insideProxyAddr + "=unix:" + insideEgress + "/" + egressSocketName}
	if np := noProxyFor(spec.egress); np != "" {
		args = append(args, "--no-proxy", np)
	}
	return args
}

// egressServer is a running proxy of one sandbox; a nil one is none.
type egressServer struct {
	proxy *egress.Proxy
	done  chan struct{}
}

// close stops the proxy and waits until it stopped serving.
func (e *egressServer) close() {
	if e == nil {
		return
	}
	_ = e.proxy.Close()
	<-e.done
}

// startEgress starts the proxy of sandbox id in dir when its spec has an
// allow policy (nil, nil otherwise): it makes (or checks) the egress
// directory, replaces a socket a previous daemon left and serves on a new
// one that the sandbox's host user may connect to.
func (p *Provider) startEgress(id, dir string, spec sandboxSpec) (*egressServer, error) {
	if !spec.egress.IsAllow() {
		return nil, nil
	}
	fail := func(err error) error {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: egress proxy: %w", id, err))
	}
	ln, err := listenInServerDir(filepath.Join(dir, egressDir), 0o755, egressSocketName)
	if err != nil {
		return nil, fail(err)
	}
	sock := filepath.Join(dir, egressDir, egressSocketName)
	// Only the sandbox's host user (and the server) may connect.
	if owner := p.ownerFor(spec); owner[0] >= 0 {
		if err := os.Lchown(sock, owner[0], owner[1]); err != nil {
			_ = ln.Close()
			return nil, fail(err)
		}
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		_ = ln.Close()
		return nil, fail(err)
	}
	proxy, err := egress.New(spec.egress, egress.WithLogger(p.log.With("sandbox", id)))
	if err != nil {
		_ = ln.Close()
		return nil, fail(err)
	}
	e := &egressServer{proxy: proxy, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		if err := proxy.Serve(ln); err != nil {
			p.log.Warn("egress proxy stopped", "sandbox", id, "err", err)
		}
	}()
	p.log.Info("egress proxy started", "sandbox", id, "policy", spec.egress.String())
	return e, nil
}

package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
)

// ProxyForward is a TCP listener inside a sandbox that forwards every
// connection to a unix socket: how a sandbox without a network reaches the
// host's egress proxy (--proxy-forward 127.0.0.1:3128=unix:/path). The
// socket's directory is bound read-only into the sandbox by the host, so
// nothing inside can put another socket there.
type ProxyForward struct {
	// Listen is the TCP address to listen on, host:port.
	Listen string
	// Socket is the path of the unix socket each connection is forwarded
	// to.
	Socket string
}

// ParseProxyForward parses "HOST:PORT=unix:/path".
func ParseProxyForward(s string) (ProxyForward, error) {
	listen, target, ok := strings.Cut(s, "=")
	path, isUnix := strings.CutPrefix(target, "unix:")
	if !ok || !isUnix || path == "" || !strings.HasPrefix(path, "/") {
		return ProxyForward{}, fmt.Errorf("--proxy-forward %q: want HOST:PORT=unix:/absolute/path", s)
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return ProxyForward{}, fmt.Errorf("--proxy-forward %q: %w", s, err)
	}
	return ProxyForward{Listen: listen, Socket: path}, nil
}

// ProxyEnv are the variables that send a process's HTTP(S) clients through
// the forwarder at addr: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and their
// lowercase forms, and NO_PROXY and no_proxy set to noProxy when it is not
// empty.
func ProxyEnv(addr, noProxy string) map[string]string {
	url := "http://" + addr
	env := map[string]string{}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
		env[k], env[strings.ToLower(k)] = url, url
	}
	if noProxy != "" {
		env["NO_PROXY"], env["no_proxy"] = noProxy, noProxy
	}
	return env
}

// serveProxyForward listens on fw.Listen and forwards each connection to
// fw.Socket until ctx ends; it returns once it listens. The returned
// function stops it and waits for its connections to end.
func serveProxyForward(ctx context.Context, fw ProxyForward, log *slog.Logger) (stop func(), err error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", fw.Listen)
	if err != nil {
		return nil, fmt.Errorf("--proxy-forward: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		var d net.Dialer
		for {
			c, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					log.Warn("proxy forwarder stopped", "err", err)
				}
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				up, err := d.DialContext(ctx, "unix", fw.Socket)
				if err != nil {
					log.Warn("proxy forwarder: the host's proxy is not reachable", "socket", fw.Socket, "err", err)
					_ = c.Close()
					return
				}
				mu.Lock()
				conns[c], conns[up] = struct{}{}, struct{}{}
				mu.Unlock()
				pipe(c, up)
				mu.Lock()
				delete(conns, c)
				delete(conns, up)
				mu.Unlock()
			}()
		}
	}()
	return func() { cancel(); wg.Wait() }, nil
}

// pipe copies both ways between a and b until both directions end, then
// closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(b, a)
		halfClose(b)
	}()
	_, _ = io.Copy(a, b)
	halfClose(a)
	<-done
	_ = a.Close()
	_ = b.Close()
}

func halfClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// Package netcopy joins two connections so that bytes flow both ways, for
// the proxies on either side of a sandbox (the envd proxy forwarder and the
// host's egress proxy). It imports only the standard library, so the lean
// envd binary can use it too.
package netcopy

import (
	"io"
	"net"
)

// Join copies both ways between a and b until both directions end, then
// closes both. Bytes from a are read through fromA, which lets a caller pass
// a reader that already buffered some of a's bytes; nil reads a itself.
// When one direction ends, the receiving connection is half-closed (see
// CloseWrite) so the other direction can still finish.
func Join(a net.Conn, fromA io.Reader, b net.Conn) {
	if fromA == nil {
		fromA = a
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(b, fromA)
		CloseWrite(b)
	}()
	_, _ = io.Copy(a, b)
	CloseWrite(a)
	<-done
	_ = a.Close()
	_ = b.Close()
}

// CloseWrite half-closes c when it can (TCP and Unix connections), else
// closes it.
func CloseWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

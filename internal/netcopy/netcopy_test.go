package netcopy_test

import (
	"bufio"
	"io"
	"net"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/netcopy"
)

// tcpPair returns both ends of one loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := <-accepted
	if c == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = dialed.Close(); _ = c.Close() })
	return dialed, c
}

// TestJoin sends bytes each way through Join, with some of one side's bytes
// already buffered, and checks each side sees the other's bytes and the end.
func TestJoin(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		name := "direct"
		if buffered {
			name = "buffered"
		}
		t.Run(name, func(t *testing.T) {
			clientOuter, clientInner := tcpPair(t)
			upstreamInner, upstreamOuter := tcpPair(t)
			if _, err := io.WriteString(clientOuter, "hello "); err != nil {
				t.Fatal(err)
			}
			var fromA io.Reader
			if buffered {
				br := bufio.NewReader(clientInner)
				if _, err := br.Peek(len("hello ")); err != nil {
					t.Fatal(err)
				}
				fromA = br
			}
			joined := make(chan struct{})
			go func() {
				defer close(joined)
				netcopy.Join(clientInner, fromA, upstreamInner)
			}()
			if _, err := io.WriteString(clientOuter, "upstream"); err != nil {
				t.Fatal(err)
			}
			netcopy.CloseWrite(clientOuter)
			got, err := io.ReadAll(upstreamOuter)
			if err != nil || string(got) != "hello upstream" {
				t.Fatalf("upstream read %q, %v; want %q", got, err, "hello upstream")
			}
			if _, err := io.WriteString(upstreamOuter, "and back"); err != nil {
				t.Fatal(err)
			}
			netcopy.CloseWrite(upstreamOuter)
			got, err = io.ReadAll(clientOuter)
			if err != nil || string(got) != "and back" {
				t.Fatalf("client read %q, %v; want %q", got, err, "and back")
			}
			<-joined
		})
	}
}

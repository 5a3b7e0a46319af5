//go:build linux

package envdclient_test

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// WithUnixSocketCheck sees the socket path before every new connection; a
// refusal fails the call as not sent, and the socket is never dialed.
func TestUnixSocketCheck(t *testing.T) {
	d := envdtest.Serve(t, "unix", daemon.Config{})
	sock := strings.TrimPrefix(d.Endpoint, "unix:")
	var mu sync.Mutex
	var seen []string
	refuse := errors.New("a sandbox could have replaced this path")
	refusing := false
	c := newClient(t, d.Endpoint, envdclient.WithUnixSocketCheck(func(path string) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, path)
		if refusing {
			return refuse
		}
		return nil
	}))
	if err := c.Health(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != sock {
		t.Errorf("checked %v; want [%s]", seen, sock)
	}
	refusing = true
	mu.Unlock()
	// A new connection is needed once the idle one is gone.
	c.Close()
	err := c.Health(t.Context())
	var dial *envdclient.DialError
	if !errors.As(err, &dial) || !errors.Is(err, refuse) || !envdclient.IsNotSent(err) {
		t.Fatalf("Health with the check refusing = %v; want a DialError wrapping the refusal", err)
	}

	// A refused path is never dialed: a listener there has no connection
	// waiting.
	fake := filepath.Join(envdtest.ShortTempDir(t), "fake.sock")
	ln, err := net.Listen("unix", fake)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c2 := newClient(t, "unix:"+fake, envdclient.WithUnixSocketCheck(func(string) error { return refuse }))
	if err := c2.Health(t.Context()); !errors.Is(err, refuse) {
		t.Fatalf("Health = %v; want the refusal", err)
	}
	if envdtest.Connected(t, ln.(*net.UnixListener)) {
		t.Fatal("the refused socket was connected to")
	}
	// (A connection would have been seen.)
	conn, err := net.Dial("unix", fake)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !envdtest.Connected(t, ln.(*net.UnixListener)) {
		t.Fatal("connected missed a waiting connection")
	}
}

package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
)

func TestParseProxyForward(t *testing.T) {
	fw, err := ParseProxyForward("127.0.0.1:3128=unix:/run/egress/proxy.sock")
	if err != nil || fw.Listen != "127.0.0.1:3128" || fw.Socket != "/run/egress/proxy.sock" {
		t.Fatalf("got %+v, %v", fw, err)
	}
	for _, bad := range []string{"", "127.0.0.1:3128", "127.0.0.1:3128=/x", "127.0.0.1:3128=unix:rel", "noport=unix:/x"} {
		if _, err := ParseProxyForward(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestProxyForwardCopiesBothWays(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	up, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		c, err := up.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "echo %s", line)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Port 0: the test learns nothing of the port, so listen on a known
	// free one first.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	_ = probe.Close()
	stop, err := serveProxyForward(ctx, ProxyForward{Listen: addr, Socket: sock}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "hello\n")
	got, _ := io.ReadAll(c)
	if string(got) != "echo hello\n" {
		t.Fatalf("got %q", got)
	}
	env := ProxyEnv(addr, "localhost")
	if env["HTTPS_PROXY"] != "http://"+addr || env["no_proxy"] != "localhost" || len(env) != 8 {
		t.Fatalf("env %v", env)
	}
}

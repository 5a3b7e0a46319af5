package egress_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/egress"
)

// fakeResolver answers from a fixed table.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// upstream is an HTTP server on loopback that answers with the Host it saw.
func upstream(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s path=%s", r.Host, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv, strings.TrimPrefix(srv.URL, "http://")
}

// startProxy serves a proxy for policy on a loopback port and returns its
// address and what it logged.
func startProxy(t *testing.T, policy string, res egress.Resolver) (string, *strings.Builder) {
	t.Helper()
	pol, err := manage.ParseNetworkPolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	opts := []egress.Option{egress.WithLogger(slog.New(slog.NewTextHandler(&syncWriter{b: &logs}, nil)))}
	if res != nil {
		opts = append(opts, egress.WithResolver(res))
	}
	p, err := egress.New(pol, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		_ = p.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String(), &logs
}

type syncWriter struct{ b *strings.Builder }

func (w *syncWriter) Write(p []byte) (int, error) { return w.b.Write(p) }

// rawRequest sends req as written to the proxy and returns the response.
func rawRequest(t *testing.T, proxy, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(req, "CONNECT") {
		return resp, ""
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func isRefusal(t *testing.T, resp *http.Response, body, target string) {
	t.Helper()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(egress.RefusalHeader) != "refused" {
		t.Fatalf("status %s, header %q: want a 403 refusal", resp.Status, resp.Header.Get(egress.RefusalHeader))
	}
	if !strings.Contains(resp.Status, egress.RefusalMarker+" "+target) {
		t.Errorf("status %q does not name the marker and %s", resp.Status, target)
	}
	if !strings.Contains(body, egress.RefusalMarker+" "+target) {
		t.Errorf("body %q does not name the marker and %s", body, target)
	}
}

func TestPlainHTTPAllowedAndHostHeaderIgnored(t *testing.T) {
	_, addr := upstream(t)
	proxy, _ := startProxy(t, "allow="+addr, nil)
	pu, _ := url.Parse("http://" + proxy)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	resp, err := client.Get("http://" + addr + "/simple/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "host="+addr+" path=/simple/" {
		t.Fatalf("got %s %q", resp.Status, body)
	}
	// An allowed absolute URI with another Host: the request goes to the
	// URI's host, with its Host.
	resp2, body2 := rawRequest(t, proxy, "GET http://"+addr+"/x HTTP/1.1\r\nHost: 1.1.1.1\r\nConnection: close\r\n\r\n")
	if resp2.StatusCode != 200 || body2 != "host="+addr+" path=/x" {
		t.Fatalf("Host mismatch: got %s %q", resp2.Status, body2)
	}
	// An unlisted absolute URI with the allowed Host: refused.
	resp3, body3 := rawRequest(t, proxy, "GET http://1.1.1.1/x HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n")
	isRefusal(t, resp3, body3, "1.1.1.1:80")
	// A request in origin form (no absolute URI): not a proxy request.
	resp4, _ := rawRequest(t, proxy, "GET /x HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n")
	if resp4.StatusCode != http.StatusBadRequest {
		t.Fatalf("origin form: got %s, want 400", resp4.Status)
	}
}

func TestConnectAllowedAndUnlistedPort(t *testing.T) {
	_, addr := upstream(t)
	other, otherAddr := upstream(t)
	_ = other
	proxy, logs := startProxy(t, "allow="+addr, nil)
	resp, _ := rawRequest(t, proxy, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT allowed: %s", resp.Status)
	}
	// The same host, another port.
	resp, body := rawRequest(t, proxy, "CONNECT "+otherAddr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	isRefusal(t, resp, body, otherAddr)
	if !strings.Contains(logs.String(), "egress refused") || !strings.Contains(logs.String(), otherAddr) {
		t.Errorf("refusal not logged: %s", logs.String())
	}
}

func TestConnectThroughTunnel(t *testing.T) {
	_, addr := upstream(t)
	proxy, _ := startProxy(t, "allow="+addr, nil)
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nGET /tunnel HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr, addr, addr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "host="+addr+" path=/tunnel" {
		t.Fatalf("through the tunnel: %q", body)
	}
}

func TestNameResolvingToLoopbackRefused(t *testing.T) {
	_, addr := upstream(t)
	_, port, _ := net.SplitHostPort(addr)
	res := fakeResolver{
		"rebind.example.com": {netip.MustParseAddr("127.0.0.1")},
		"mixed.example.com":  {netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("::ffff:192.168.1.1")},
	}
	proxy, _ := startProxy(t, "allow=rebind.example.com:"+port+",mixed.example.com:"+port, res)
	for _, name := range []string{"rebind.example.com", "mixed.example.com"} {
		target := name + ":" + port
		resp, body := rawRequest(t, proxy, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		isRefusal(t, resp, body, target)
		if !strings.Contains(body, "non-public") {
			t.Errorf("%s: body %q does not say why", name, body)
		}
		resp, body = rawRequest(t, proxy, "GET http://"+target+"/ HTTP/1.1\r\nHost: "+target+"\r\nConnection: close\r\n\r\n")
		isRefusal(t, resp, body, target)
	}
}

func TestUnlistedDestinations(t *testing.T) {
	proxy, _ := startProxy(t, "allow=pypi.org,*.pythonhosted.org", fakeResolver{})
	for _, target := range []string{"1.1.1.1:443", "example.com:443", "pypi.org:22", "pythonhosted.org:443", "evilpypi.org:443"} {
		resp, body := rawRequest(t, proxy, "CONNECT "+target+" HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
		isRefusal(t, resp, body, target)
	}
}

func TestIsPublic(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.0.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "fe80::1", "fd00::1", "::ffff:127.0.0.1", "64:ff9b::7f00:1", "224.0.0.1", "255.255.255.255"} {
		if egress.IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsPublic(%s) = true", s)
		}
	}
	for _, s := range []string{"1.1.1.1", "151.101.0.223", "2606:4700::1111"} {
		if !egress.IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsPublic(%s) = false", s)
		}
	}
}

//go:build linux

package daemon_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/envd/rest"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem/filesystemconnect"
	"github.com/sandbox-mcp/sandbox-mcp/proto/process"
	"github.com/sandbox-mcp/sandbox-mcp/proto/process/processconnect"
)

// serveTCP runs cfg on loopback TCP and returns its base URL.
func serveTCP(t *testing.T, cfg daemon.Config) (string, string) {
	t.Helper()
	d := envdtest.Serve(t, "tcp", cfg)
	return d.Endpoint, d.Root
}

func h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

// runEcho starts `echo hi` through the Process service and returns its
// stdout, with the given client options.
func runEcho(t *testing.T, hc *http.Client, base string, header http.Header, opts ...connect.ClientOption) (string, error) {
	t.Helper()
	c := processconnect.NewProcessClient(hc, base, opts...)
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/echo", Args: []string{"hi"}}})
	for k, vs := range header {
		req.Header()[k] = vs
	}
	stream, err := c.Start(context.Background(), req)
	if err != nil {
		return "", err
	}
	defer stream.Close()
	var out bytes.Buffer
	for stream.Receive() {
		if d := stream.Msg().GetEvent().GetData(); d != nil {
			out.Write(d.GetStdout())
		}
	}
	return out.String(), stream.Err()
}

// Connect, gRPC and gRPC-Web, binary and JSON, HTTP/1.1 and h2c: one handler
// serves them all.
func TestProtocols(t *testing.T) {
	base, _ := serveTCP(t, daemon.Config{})
	cases := []struct {
		name string
		hc   *http.Client
		opts []connect.ClientOption
	}{
		{"connect-json-http1", http.DefaultClient, []connect.ClientOption{connect.WithProtoJSON()}},
		{"connect-binary-h2c", h2cClient(), nil},
		{"grpc-h2c", h2cClient(), []connect.ClientOption{connect.WithGRPC()}},
		{"grpcweb-http1", http.DefaultClient, []connect.ClientOption{connect.WithGRPCWeb()}},
		{"grpcweb-json-http1", http.DefaultClient, []connect.ClientOption{connect.WithGRPCWeb(), connect.WithProtoJSON()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runEcho(t, tc.hc, base, nil, tc.opts...)
			if err != nil || out != "hi\n" {
				t.Fatalf("echo over %s = %q, %v", tc.name, out, err)
			}
		})
	}
}

func TestAccessToken(t *testing.T) {
	base, root := serveTCP(t, daemon.Config{AccessToken: "s3cret"})
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	get := func(path string, header http.Header) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		for k, vs := range header {
			req.Header[k] = vs
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// /health stays open.
	if resp := get("/health", nil); resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Envd-Version") != daemon.Version {
		t.Fatalf("/health without token: %d version %q", resp.StatusCode, resp.Header.Get("X-Envd-Version"))
	}
	// Everything else needs the token: REST…
	for _, path := range []string{"/envs", "/metrics", "/files?path=f"} {
		resp := get(path, nil)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"code":401`) {
			t.Errorf("%s without token: %d %s", path, resp.StatusCode, body)
		}
		if resp := get(path, http.Header{"X-Access-Token": {"s3cret"}}); resp.StatusCode != http.StatusOK {
			t.Errorf("%s with token: %d", path, resp.StatusCode)
		}
	}
	// …a signed URL works for /files…
	sig := rest.Signature("f", rest.OperationRead, "", "s3cret", 0)
	if resp := get("/files?path=f&signature="+sig, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("/files with a valid signature: %d", resp.StatusCode)
	}
	// …and RPCs get unauthenticated.
	_, err := runEcho(t, http.DefaultClient, base, nil, connect.WithProtoJSON())
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("RPC without token = %v; want unauthenticated", err)
	}
	if out, err := runEcho(t, http.DefaultClient, base, http.Header{"X-Access-Token": {"s3cret"}}); err != nil || out != "hi\n" {
		t.Errorf("RPC with token = %q, %v", out, err)
	}
	if _, err := runEcho(t, http.DefaultClient, base, http.Header{"X-Access-Token": {"wrong"}}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("RPC with a wrong token = %v; want unauthenticated", err)
	}
}

func TestBasicAuthUser(t *testing.T) {
	var logs bytes.Buffer
	base, _ := serveTCP(t, daemon.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	basic := func(user string) http.Header {
		return http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))}}
	}
	// E2B templates have a "user" account; this machine may not. The request
	// still runs (as the daemon's own user, or as user when it exists).
	if out, err := runEcho(t, http.DefaultClient, base, basic("no-such-user-here")); err != nil || out != "hi\n" {
		t.Fatalf("unknown Basic user = %q, %v; want it to run", out, err)
	}
	if !strings.Contains(logs.String(), "no-such-user-here") {
		t.Errorf("the substitution was not logged: %s", logs.String())
	}
	// A malformed Authorization header is refused.
	if _, err := runEcho(t, http.DefaultClient, base, http.Header{"Authorization": {"Basic !!!"}}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("malformed Basic header = %v; want unauthenticated", err)
	}
}

// Malformed Connect traffic gets an error and the daemon keeps serving.
// The codes are connect-go's: a truncated envelope is internal, a message
// that does not decode invalid_argument, an unknown Content-Type HTTP 415.
func TestMalformedFramesKeepServing(t *testing.T) {
	base, _ := serveTCP(t, daemon.Config{})
	bodies := []struct {
		ctype  string
		body   []byte
		status int          // HTTP status
		code   connect.Code // in the Connect end-stream frame or the grpc-status trailer; 0 for none
	}{
		{"application/connect+proto", []byte{0x00, 0xff, 0xff, 0xff, 0xff}, http.StatusOK, connect.CodeInternal}, // absurd length
		{"application/connect+proto", []byte{0x00, 0x00, 0x00, 0x00, 0x05, 0x01}, http.StatusOK, connect.CodeInternal},
		{"application/connect+proto", frame(0x00, []byte{0xff}), http.StatusOK, connect.CodeInvalidArgument},
		{"application/connect+json", append([]byte{0x00, 0, 0, 0, 9}, []byte(`{"proc`)...), http.StatusOK, connect.CodeInternal},
		{"application/connect+json", frame(0x00, []byte(`{"process":{"cmd":1}}`)), http.StatusOK, connect.CodeInvalidArgument},
		{"application/grpc", []byte{0x07}, http.StatusOK, connect.CodeInternal},
		{"application/grpc", frame(0x00, []byte{0xff}), http.StatusOK, connect.CodeInvalidArgument},
		{"text/plain", []byte("hello"), http.StatusUnsupportedMediaType, 0},
	}
	for _, hc := range []*http.Client{http.DefaultClient, h2cClient()} {
		for _, b := range bodies {
			req, _ := http.NewRequest(http.MethodPost, base+"/process.Process/Start", bytes.NewReader(b.body))
			req.Header.Set("Content-Type", b.ctype)
			req.Header.Set("Connect-Protocol-Version", "1")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			what := fmt.Sprintf("%s %s %x", resp.Proto, b.ctype, b.body)
			if resp.StatusCode != b.status {
				t.Errorf("%s: status %d, want %d (%q)", what, resp.StatusCode, b.status, body)
				continue
			}
			var code connect.Code
			switch {
			case strings.HasPrefix(b.ctype, "application/connect"):
				code = connectEndCode(t, what, body)
			case strings.HasPrefix(b.ctype, "application/grpc"):
				n, err := strconv.Atoi(resp.Trailer.Get("Grpc-Status"))
				if err != nil || len(body) != 0 {
					t.Errorf("%s: grpc-status %q, body %q; want a status and no messages", what, resp.Trailer.Get("Grpc-Status"), body)
					continue
				}
				code = connect.Code(n)
			}
			if code != b.code {
				t.Errorf("%s: code %v, want %v", what, code, b.code)
			}
		}
	}
	// A garbage connection, then a good call.
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00garbage-frames"))
	conn.Close()
	fs := filesystemconnect.NewFilesystemClient(http.DefaultClient, base, connect.WithProtoJSON())
	if _, err := fs.Stat(context.Background(), connect.NewRequest(&filesystem.StatRequest{Path: ""})); err != nil {
		t.Fatalf("daemon stopped serving after malformed input: %v", err)
	}
	if out, err := runEcho(t, h2cClient(), base, nil); err != nil || out != "hi\n" {
		t.Fatalf("daemon stopped serving after malformed input: %q %v", out, err)
	}
}

// connectEndCode returns the error code of a Connect stream's body that
// holds nothing but its end-stream frame.
func connectEndCode(t *testing.T, what string, body []byte) connect.Code {
	t.Helper()
	if len(body) < 5 || body[0] != 0x02 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		t.Errorf("%s: body %q is not a lone end-stream frame", what, body)
		return 0
	}
	var end struct {
		Error *struct {
			Code connect.Code `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body[5:], &end); err != nil || end.Error == nil {
		t.Errorf("%s: end-stream frame %q carries no error (%v)", what, body[5:], err)
		return 0
	}
	return end.Error.Code
}

func frame(flags byte, payload []byte) []byte {
	out := make([]byte, 5+len(payload))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:5], uint32(len(payload)))
	copy(out[5:], payload)
	return out
}

func TestCORSPreflight(t *testing.T) {
	base, _ := serveTCP(t, daemon.Config{AccessToken: "t"})
	req, _ := http.NewRequest(http.MethodOptions, base+"/process.Process/Start", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestListenErrors(t *testing.T) {
	dir := envdtest.ShortTempDir(t)
	file := filepath.Join(dir, "regular")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"unix:", "unix:" + file, "not-an-address", "unix:" + filepath.Join(dir, "missing", "s")} {
		if ln, err := daemon.Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) succeeded", addr)
		}
	}
	// A stale socket from a dead daemon is replaced; a live one is not.
	sock := filepath.Join(dir, "s")
	ln1, err := daemon.Listen("unix:" + sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.Listen("unix:" + sock); err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Errorf("Listen on a live socket = %v", err)
	}
	ln1.(*net.UnixListener).SetUnlinkOnClose(false)
	ln1.Close()
	ln2, err := daemon.Listen("unix:" + sock)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ln2.Close()
	if _, err := daemon.New(daemon.Config{}); err == nil {
		t.Error("New without a root succeeded")
	}
	if _, err := daemon.New(daemon.Config{Root: file}); err == nil {
		t.Error("New with a file as root succeeded")
	}
}

// Close ends in-flight streams at once, reports no error for a clean close,
// and Serve then returns nil; later Serves are refused.
func TestCloseEndsStreams(t *testing.T) {
	d, err := daemon.New(daemon.Config{Root: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := daemon.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Serve(ln) }()
	base := "http://" + ln.Addr().String()

	c := processconnect.NewProcessClient(h2cClient(), base)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a failure guard
	defer cancel()
	stream, err := c.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "sleep", Args: []string{"100"}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	for stream.Receive() {
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after Close = %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve still running after Close")
	}
	ln2, err := daemon.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	if err := d.Serve(ln2); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve after Close = %v, want http.ErrServerClosed", err)
	}
}

// A shutdown that comes right after the ready line, before the goroutine
// serving the listener got to run, is a clean shutdown (the lean envd
// exited 1 with "http: Server closed" on a SIGTERM that early).
func TestRunStoppedAtOnceIsClean(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range 50 {
		if err := daemon.Run(ctx, daemon.Config{Root: t.TempDir(), Logger: quiet}, "127.0.0.1:0", nil); err != nil {
			t.Fatalf("run %d: Run with its context already ended = %v; want nil", i, err)
		}
	}
}

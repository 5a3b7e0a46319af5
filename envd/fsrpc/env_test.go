//go:build linux

package fsrpc_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/fsrpc"
	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem/filesystemconnect"
)

// testTimeout bounds every wait; it only fires when a test is failing.
const testTimeout = 30 * time.Second

// env is a Filesystem service on a real HTTP server (HTTP/1.1 and h2c) with
// the two kinds of client E2B's SDKs and sandbox-mcp use.
type env struct {
	root    string
	svc     *fsrpc.Service
	users   *identity.Resolver
	clients []namedClient
	// lastProto is the protocol of the latest request the server saw.
	lastProto atomic.Value
}

type namedClient struct {
	name string
	filesystemconnect.FilesystemClient
	// raw makes requests with extra headers (Basic auth) on the same
	// transport.
	http *http.Client
	opts []connect.ClientOption
	url  string
}

// withBasic returns a client for the same server that sends
// `Authorization: Basic base64(user:)`, as E2B's SDKs do.
func (c namedClient) withBasic(user string) filesystemconnect.FilesystemClient {
	hc := &http.Client{Transport: basicTransport{user: user, next: c.http.Transport}}
	return filesystemconnect.NewFilesystemClient(hc, c.url, c.opts...)
}

type basicTransport struct {
	user string
	next http.RoundTripper
}

func (t basicTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(t.user, "")
	return t.next.RoundTrip(r)
}

type envOptions struct {
	unconfined bool
}

func newEnv(t *testing.T, opts ...envOptions) *env {
	t.Helper()
	var o envOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := paths.New(root, !o.unconfined)
	if err != nil {
		t.Fatal(err)
	}
	users := identity.NewResolver(identity.ResolverOptions{Home: root})
	svc := fsrpc.New(fsrpc.Options{Paths: resolver, Users: users})
	e := &env{root: root, svc: svc, users: users}

	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	// The daemon's middleware puts the Basic-auth user in the context.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.lastProto.Store(r.Proto)
		name, err := identity.ParseBasic(r.Header.Get("Authorization"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if name != "" {
			r = r.WithContext(identity.WithUser(r.Context(), users.Lookup(name)))
		}
		mux.ServeHTTP(w, r)
	})
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	// Registered after srv.Close so it runs first and ends open streams.
	t.Cleanup(svc.Close)

	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: h2}}
	h1 := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(h2c.CloseIdleConnections)
	t.Cleanup(h1.CloseIdleConnections)
	jsonOpts := []connect.ClientOption{connect.WithProtoJSON()}
	e.clients = []namedClient{
		{name: "binary-h2c", FilesystemClient: filesystemconnect.NewFilesystemClient(h2c, srv.URL), http: h2c, url: srv.URL},
		{name: "json-http1", FilesystemClient: filesystemconnect.NewFilesystemClient(h1, srv.URL, jsonOpts...), http: h1, url: srv.URL, opts: jsonOpts},
	}
	return e
}

// each runs f once per client kind, as subtests.
func (e *env) each(t *testing.T, f func(t *testing.T, c namedClient)) {
	t.Helper()
	for _, c := range e.clients {
		t.Run(c.name, func(t *testing.T) { f(t, c) })
	}
}

// path returns the absolute path of rel under the root.
func (e *env) path(rel string) string { return filepath.Join(e.root, rel) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails unless err is a Connect error with code and a message
// containing each of contains.
func wantCode(t *testing.T, err error, code connect.Code, contains ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", code)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("got %T %v, want a connect error with code %v", err, err, code)
	}
	if ce.Code() != code {
		t.Fatalf("got code %v (%s), want %v", ce.Code(), ce.Message(), code)
	}
	for _, s := range contains {
		if !strings.Contains(ce.Message(), s) {
			t.Fatalf("message %q does not contain %q", ce.Message(), s)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

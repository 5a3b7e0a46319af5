//go:build linux

package rest_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/fsrpc"
	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
	"github.com/sandbox-mcp/sandbox-mcp/envd/rest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem/filesystemconnect"
)

// env is the REST handler (and the Filesystem service, to check metadata
// through Stat) on a real HTTP server whose root sits inside a private base
// directory, so that tests can see anything written outside the root.
type env struct {
	base, root string
	opts       rest.Options
	srv        *httptest.Server
	client     *http.Client // no transparent gzip: tests see the wire
	fs         filesystemconnect.FilesystemClient
}

func newEnv(t testing.TB, configure ...func(*rest.Options)) *env {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	resolver, err := paths.New(root, true)
	if err != nil {
		t.Fatal(err)
	}
	users := identity.NewResolver(identity.ResolverOptions{Home: root})
	opts := rest.Options{Paths: resolver, Users: users}
	for _, c := range configure {
		c(&opts)
	}
	svc := fsrpc.New(fsrpc.Options{Paths: resolver, Users: users})
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	mux.Handle("/", rest.New(opts))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(svc.Close)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	return &env{
		base:   base,
		root:   root,
		opts:   opts,
		srv:    srv,
		client: client,
		fs:     filesystemconnect.NewFilesystemClient(client, srv.URL),
	}
}

func (e *env) path(rel string) string { return filepath.Join(e.root, rel) }

// url builds a URL on the test server from a path and query pairs.
func (e *env) url(p string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Add(kv[i], kv[i+1])
	}
	u := e.srv.URL + p
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// response is a finished HTTP exchange.
type response struct {
	*http.Response
	body []byte
}

func (e *env) do(t testing.TB, req *http.Request) response {
	t.Helper()
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{res, body}
}

func (e *env) get(t testing.TB, u string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return e.do(t, req)
}

func (e *env) post(t testing.TB, u, contentType string, body io.Reader, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return e.do(t, req)
}

// upload posts content as application/octet-stream to path.
func (e *env) upload(t testing.TB, path, content string, headers ...string) response {
	t.Helper()
	return e.post(t, e.url("/files", "path", path), "application/octet-stream", strings.NewReader(content), headers...)
}

// multipartBody builds a multipart body; parts are (field, filename,
// content) triples.
func multipartBody(t testing.TB, parts ...[3]string) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		var w io.Writer
		var err error
		if p[1] == "" {
			w, err = mw.CreateFormField(p[0])
		} else {
			w, err = mw.CreateFormFile(p[0], p[1])
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, p[2]); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), &buf
}

type errorReply struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// wantError fails unless res is the JSON error with status and a message
// containing each of contains.
func wantError(t testing.TB, res response, status int, contains ...string) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d (%s), want %d", res.StatusCode, res.body, status)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("error Content-Type %q", ct)
	}
	var er errorReply
	if err := json.Unmarshal(res.body, &er); err != nil {
		t.Fatalf("error body %q: %v", res.body, err)
	}
	if er.Code != status {
		t.Fatalf("error code %d, want %d", er.Code, status)
	}
	for _, s := range contains {
		if !strings.Contains(er.Message, s) {
			t.Fatalf("error message %q does not contain %q", er.Message, s)
		}
	}
}

func wantStatus(t testing.TB, res response, status int) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d (%s), want %d", res.StatusCode, res.body, status)
	}
}

type uploaded struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata"`
}

func decodeUploaded(t testing.TB, res response) []uploaded {
	t.Helper()
	wantStatus(t, res, http.StatusOK)
	var out []uploaded
	if err := json.Unmarshal(res.body, &out); err != nil {
		t.Fatalf("upload reply %q: %v", res.body, err)
	}
	return out
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// randomData returns a deterministic pseudo-random stream of n bytes.
func randomData(seed uint64, n int64) io.Reader {
	var key [32]byte
	copy(key[:], strconv.FormatUint(seed, 10))
	return io.LimitReader(rand.NewChaCha8(key), n)
}

// sign computes an E2B signature independently of the package under test.
func sign(path, op, user, token, expires string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expires != "" {
		raw += ":" + expires
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// leftovers lists temporary upload files under dir.
func leftovers(t testing.TB, dir string) []string {
	t.Helper()
	var found []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".upload-") {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// mountTmpfs mounts a tmpfs of the given size (e.g. "1m") at dir.
func mountTmpfs(t testing.TB, dir, size string) {
	t.Helper()
	testenv.RequireRoot(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.Missing(t, "a tmpfs mount (%v: %s): run the tests as root where mount(8) may mount tmpfs", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

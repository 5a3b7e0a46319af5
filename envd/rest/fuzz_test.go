//go:build linux

package rest_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
	"github.com/sandbox-mcp/sandbox-mcp/envd/paths"
	"github.com/sandbox-mcp/sandbox-mcp/envd/rest"
)

// FuzzUpload sends random upload requests (raw, multipart, gzip; random
// query strings, content types, encodings and metadata headers) through the
// handler. It must never panic, must answer with an expected status and the
// JSON error shape, must never write outside the confined root, and must
// never leave a temporary file behind. "{base}" and "{root}" in the query
// and filename stand for the directory holding the root and the root.
func FuzzUpload(f *testing.F) {
	f.Add(uint8(0), "path=a.txt", "application/octet-stream", "", "", "", "", []byte("hello"))
	f.Add(uint8(1), "", "", "", "dir/b.txt", "author", "me", []byte("multi"))
	f.Add(uint8(1), "", "", "", "{base}/escape.txt", "", "", []byte("x"))
	f.Add(uint8(1), "", "", "", "../escape.txt", "", "", []byte("x"))
	f.Add(uint8(1), "path=dir", "", "", "x", "", "", []byte("x"))
	f.Add(uint8(2), "path=z/gz.txt", "", "", "", "k", "v", []byte("gzipped"))
	f.Add(uint8(0), "path={base}/outside.txt", "application/octet-stream", "", "", "", "", []byte("overwrite"))
	f.Add(uint8(0), "path=escape/new.txt", "application/octet-stream", "", "", "", "", []byte("x"))
	f.Add(uint8(0), "path={root}/../evil", "application/octet-stream", "", "", "", "", []byte("x"))
	f.Add(uint8(0), "path=~/home.txt&username=nobody", "application/octet-stream", "", "", "", "", []byte("x"))
	f.Add(uint8(3), "path=c.txt", "application/octet-stream", "gzip", "", "", "", []byte("not gzip"))
	f.Add(uint8(3), "path=c.txt", "multipart/form-data; boundary=x", "", "", "", "", []byte("--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../../e\"\r\n\r\nx\r\n--x--\r\n"))
	f.Add(uint8(0), "path=big", "application/octet-stream", "", "", "", "", bytes.Repeat([]byte("z"), 70000))
	f.Add(uint8(0), "path=a%00b", "application/octet-stream", "", "", "bad key", "é", []byte("x"))

	f.Fuzz(func(t *testing.T, kind uint8, query, contentType, encoding, filename, metaKey, metaVal string, body []byte) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		for _, d := range []string{root, filepath.Join(root, "dir")} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		outside := filepath.Join(base, "outside.txt")
		if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(base, filepath.Join(root, "escape")); err != nil {
			t.Fatal(err)
		}
		resolver, err := paths.New(root, true)
		if err != nil {
			t.Fatal(err)
		}
		h := rest.New(rest.Options{
			Paths:          resolver,
			Users:          identity.NewResolver(identity.ResolverOptions{Home: root}),
			MaxUploadBytes: 1 << 16,
		})
		expand := strings.NewReplacer("{base}", base, "{root}", root)
		query, filename = expand.Replace(query), expand.Replace(filename)

		var data []byte
		switch kind % 4 {
		case 0, 3:
			data = body
		case 1:
			var buf bytes.Buffer
			mw := multipart.NewWriter(&buf)
			w, err := mw.CreateFormFile("file", filename)
			if err != nil {
				return
			}
			_, _ = w.Write(body)
			_ = mw.Close()
			data, contentType, encoding = buf.Bytes(), mw.FormDataContentType(), ""
		case 2:
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(body)
			_ = zw.Close()
			data, contentType, encoding = buf.Bytes(), "application/octet-stream", "gzip"
		}
		req, err := http.NewRequest(http.MethodPost, "/files", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		req.URL.RawQuery = query
		req.Header.Set("Content-Type", contentType)
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		if metaKey != "" {
			req.Header["X-Metadata-"+metaKey] = []string{metaVal}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		allowed := []int{http.StatusOK, http.StatusBadRequest, http.StatusForbidden, http.StatusRequestEntityTooLarge, http.StatusInsufficientStorage}
		if !slices.Contains(allowed, rec.Code) {
			t.Fatalf("status %d: %s", rec.Code, rec.Body.Bytes())
		}
		if rec.Code == http.StatusOK {
			var files []struct {
				Path string `json:"path"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &files); err != nil || len(files) == 0 {
				t.Fatalf("200 reply %q: %v", rec.Body.Bytes(), err)
			}
			for _, f := range files {
				real, err := filepath.EvalSymlinks(f.Path)
				if err != nil {
					t.Fatalf("reported file %s: %v", f.Path, err)
				}
				if real != root && !strings.HasPrefix(real, root+"/") {
					t.Fatalf("reported file %s is outside the root", real)
				}
			}
		} else {
			var er struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || er.Code != rec.Code || er.Message == "" {
				t.Fatalf("error reply %q: %v", rec.Body.Bytes(), err)
			}
		}

		entries, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range entries {
			if d.Name() != "root" && d.Name() != "outside.txt" {
				t.Fatalf("wrote %s outside the root", d.Name())
			}
		}
		if b, _ := os.ReadFile(outside); string(b) != "secret" {
			t.Fatalf("file outside the root changed to %q", b)
		}
		if l := leftovers(t, root); len(l) > 0 {
			t.Fatalf("temporary files left: %v", l)
		}
	})
}

// FuzzSignature checks /files auth against an independent model of E2B's
// rules: a request passes iff X-Access-Token equals the token, or the
// signature matches sha256("<path>:<op>:<username>:<token>[:<exp>]") and
// the expiration (if any) has not passed. A malformed expiration is 400.
func FuzzSignature(f *testing.F) {
	const token = "fuzz-token"
	future := strconv.FormatInt(time.Now().Add(24*time.Hour).Unix(), 10)
	f.Add(uint8(0), "path=f.txt&signature="+url.QueryEscape(sign("f.txt", "read", "", token, "")), "")
	f.Add(uint8(1), "path=f.txt&username=u&signature="+url.QueryEscape(sign("f.txt", "write", "u", token, "")), "")
	f.Add(uint8(0), "path=f.txt&signature_expiration="+future+"&signature="+url.QueryEscape(sign("f.txt", "read", "", token, future)), "")
	f.Add(uint8(0), "path=f.txt&signature_expiration=1&signature="+url.QueryEscape(sign("f.txt", "read", "", token, "1")), "")
	f.Add(uint8(0), "path=f.txt&signature_expiration=x&signature=v1_", "")
	f.Add(uint8(0), "path=f.txt&signature=v1_", "")
	f.Add(uint8(0), "path=f.txt", token)
	f.Add(uint8(0), "path=f.txt", "wrong")
	f.Add(uint8(1), "path=%zz&signature=;;", "")
	f.Add(uint8(0), "path=f.txt&signature_expiration=+"+future+"&signature="+url.QueryEscape(sign("f.txt", "read", "", token, future)), "")

	base := f.TempDir()
	if err := os.WriteFile(filepath.Join(base, "f.txt"), []byte("x"), 0o644); err != nil {
		f.Fatal(err)
	}
	resolver, err := paths.New(base, true)
	if err != nil {
		f.Fatal(err)
	}
	h := rest.New(rest.Options{
		Paths:       resolver,
		Users:       identity.NewResolver(identity.ResolverOptions{Home: base}),
		AccessToken: token,
	})

	f.Fuzz(func(t *testing.T, method uint8, rawQuery, header string) {
		m, op := http.MethodGet, "read"
		if method%2 == 1 {
			m, op = http.MethodPost, "write"
		}
		req, err := http.NewRequest(m, "/files", strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req.URL.RawQuery = rawQuery
		if header != "" {
			req.Header["X-Access-Token"] = []string{header}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		// The model.
		q, _ := url.ParseQuery(rawQuery)
		want := "pass"
		switch sig, exp := q.Get("signature"), q.Get("signature_expiration"); {
		case header == token:
		case sig == "":
			want = "401"
		default:
			canon := ""
			var n int64
			if exp != "" {
				n, err = strconv.ParseInt(exp, 10, 64)
				if err != nil {
					want = "400"
					break
				}
				canon = strconv.FormatInt(n, 10)
			}
			switch {
			case sig != sign(q.Get("path"), op, q.Get("username"), token, canon):
				want = "401"
			case exp != "" && abs(n-time.Now().Unix()) < 5:
				return // too close to the clock to call
			case exp != "" && n < time.Now().Unix():
				want = "401"
			}
		}
		switch want {
		case "pass":
			if rec.Code == http.StatusUnauthorized {
				t.Fatalf("refused an authorized request: %s", rec.Body.Bytes())
			}
		case "401":
			if rec.Code != http.StatusUnauthorized {
				t.Fatalf("status %d for an unauthorized request: %s", rec.Code, rec.Body.Bytes())
			}
		case "400":
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("status %d for a malformed expiration: %s", rec.Code, rec.Body.Bytes())
			}
		}
		if rec.Code >= 400 && rec.Header().Get("Content-Type") != "application/json; charset=utf-8" {
			t.Fatalf("error without the JSON shape: %d %q", rec.Code, rec.Body.Bytes())
		}
	})
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

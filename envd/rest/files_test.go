//go:build linux

package rest_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/rest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

const bigSize = 50 << 20

// TestLargeFileRoundTrip uploads 50 MiB of random data (octet-stream and
// multipart, both streamed from a pipe) and downloads it, comparing sha256.
func TestLargeFileRoundTrip(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		send func(t *testing.T, data io.Reader) response
		dest string
	}{
		{"octet-stream", func(t *testing.T, data io.Reader) response {
			return e.post(t, e.url("/files", "path", "big/octet.bin"), "application/octet-stream", data)
		}, "big/octet.bin"},
		{"multipart", func(t *testing.T, data io.Reader) response {
			pr, pw := io.Pipe()
			mw := multipart.NewWriter(pw)
			go func() {
				w, err := mw.CreateFormFile("file", e.path("big/multipart.bin"))
				if err == nil {
					_, err = io.Copy(w, data)
				}
				if err == nil {
					err = mw.Close()
				}
				pw.CloseWithError(err)
			}()
			return e.post(t, e.url("/files"), mw.FormDataContentType(), pr)
		}, "big/multipart.bin"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sum := sha256.New()
			res := tc.send(t, io.TeeReader(randomData(uint64(i), bigSize), sum))
			got := decodeUploaded(t, res)
			if len(got) != 1 || got[0].Path != e.path(tc.dest) || got[0].Type != "file" {
				t.Fatalf("reply %+v", got)
			}
			want := sum.Sum(nil)

			dl, err := e.client.Get(e.url("/files", "path", tc.dest))
			if err != nil {
				t.Fatal(err)
			}
			defer dl.Body.Close()
			if dl.StatusCode != http.StatusOK {
				t.Fatalf("download status %d", dl.StatusCode)
			}
			if dl.ContentLength != bigSize {
				t.Fatalf("Content-Length %d, want %d", dl.ContentLength, bigSize)
			}
			down := sha256.New()
			if _, err := io.Copy(down, dl.Body); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(down.Sum(nil), want) {
				t.Fatal("downloaded sha256 differs from uploaded")
			}
		})
	}
}

func TestDownload(t *testing.T) {
	e := newEnv(t)
	content := strings.Repeat("0123456789", 1000)
	writeFile(t, e.path("dir/hello.txt"), content, 0o644)

	res := e.get(t, e.url("/files", "path", "dir/hello.txt"))
	wantStatus(t, res, http.StatusOK)
	if string(res.body) != content {
		t.Fatal("body differs")
	}
	if cd := res.Header.Get("Content-Disposition"); cd != "inline; filename=hello.txt" {
		t.Fatalf("Content-Disposition %q", cd)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/octet-stream" {
		t.Fatalf("Content-Type %q", ct)
	}

	t.Run("range", func(t *testing.T) {
		res := e.get(t, e.url("/files", "path", "dir/hello.txt"), "Range", "bytes=10-19")
		wantStatus(t, res, http.StatusPartialContent)
		if string(res.body) != content[10:20] {
			t.Fatalf("range body %q", res.body)
		}
		if cr := res.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes 10-19/%d", len(content)) {
			t.Fatalf("Content-Range %q", cr)
		}
		res = e.get(t, e.url("/files", "path", "dir/hello.txt"), "Range", "bytes=999999-")
		wantError(t, res, http.StatusRequestedRangeNotSatisfiable, "range")
	})

	t.Run("not modified", func(t *testing.T) {
		lm := res.Header.Get("Last-Modified")
		if lm == "" {
			t.Fatal("no Last-Modified")
		}
		res := e.get(t, e.url("/files", "path", "dir/hello.txt"), "If-Modified-Since", lm)
		wantStatus(t, res, http.StatusNotModified)
	})

	t.Run("gzip", func(t *testing.T) {
		for _, ae := range []string{"gzip", "gzip, deflate, br", "br;q=1, gzip;q=0.5", "*"} {
			res := e.get(t, e.url("/files", "path", "dir/hello.txt"), "Accept-Encoding", ae, "Range", "bytes=0-1")
			if ae == "*" {
				// Identity is as good as anything and cheaper; Range applies.
				wantStatus(t, res, http.StatusPartialContent)
				if res.Header.Get("Content-Encoding") != "" || string(res.body) != "01" {
					t.Fatalf("Accept-Encoding *: encoding %q", res.Header.Get("Content-Encoding"))
				}
				continue
			}
			wantStatus(t, res, http.StatusOK)
			if res.Header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("Accept-Encoding %q: Content-Encoding %q", ae, res.Header.Get("Content-Encoding"))
			}
			zr, err := gzip.NewReader(bytes.NewReader(res.body))
			if err != nil {
				t.Fatal(err)
			}
			plain, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if string(plain) != content {
				t.Fatalf("Accept-Encoding %q: gunzipped body differs (Range is ignored under gzip)", ae)
			}
		}
		res := e.get(t, e.url("/files", "path", "dir/hello.txt"), "Accept-Encoding", "br, identity;q=0")
		wantError(t, res, http.StatusNotAcceptable, "br, identity;q=0")
	})

	t.Run("head", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodHead, e.url("/files", "path", "dir/hello.txt"), nil)
		res := e.do(t, req)
		wantStatus(t, res, http.StatusOK)
		if res.ContentLength != int64(len(content)) || len(res.body) != 0 {
			t.Fatalf("HEAD: length %d, body %d bytes", res.ContentLength, len(res.body))
		}
	})

	t.Run("errors", func(t *testing.T) {
		wantError(t, e.get(t, e.url("/files", "path", "dir")), http.StatusBadRequest, e.path("dir"), "is a directory")
		wantError(t, e.get(t, e.url("/files", "path", "nope.txt")), http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", e.path("nope.txt")))
		wantError(t, e.get(t, e.url("/files", "path", "~other/x")), http.StatusBadRequest, "~other/x")
	})
}

func TestUploadVariants(t *testing.T) {
	e := newEnv(t)

	t.Run("gzip body", func(t *testing.T) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		content := strings.Repeat("compressible ", 5000)
		_, _ = zw.Write([]byte(content))
		_ = zw.Close()
		res := e.post(t, e.url("/files", "path", "gz/plain.txt"), "application/octet-stream", &buf, "Content-Encoding", "gzip")
		decodeUploaded(t, res)
		if readFile(t, e.path("gz/plain.txt")) != content {
			t.Fatal("gzip upload content differs")
		}
		// Multipart bodies may be gzipped too.
		ct, body := multipartBody(t, [3]string{"file", "gz/part.txt", "part content"})
		buf.Reset()
		zw.Reset(&buf)
		_, _ = zw.Write(body.Bytes())
		_ = zw.Close()
		decodeUploaded(t, e.post(t, e.url("/files"), ct, &buf, "Content-Encoding", "gzip"))
		if readFile(t, e.path("gz/part.txt")) != "part content" {
			t.Fatal("gzip multipart content differs")
		}
		res = e.post(t, e.url("/files", "path", "gz/bad.txt"), "application/octet-stream", strings.NewReader("not gzip"), "Content-Encoding", "gzip")
		wantError(t, res, http.StatusBadRequest, "gzip")
		res = e.post(t, e.url("/files", "path", "gz/bad.txt"), "application/octet-stream", strings.NewReader("x"), "Content-Encoding", "br")
		wantError(t, res, http.StatusBadRequest, `"br"`)
	})

	t.Run("multipart several files", func(t *testing.T) {
		ct, body := multipartBody(t,
			[3]string{"note", "", "ignored field"},
			[3]string{"file", "multi/a.txt", "A"},
			[3]string{"other", "multi/ignored.txt", "ignored file"},
			[3]string{"file", e.path("multi/deep/b.txt"), "B"},
		)
		got := decodeUploaded(t, e.post(t, e.url("/files"), ct, body))
		if len(got) != 2 || got[0].Path != e.path("multi/a.txt") || got[1].Path != e.path("multi/deep/b.txt") || got[1].Name != "b.txt" {
			t.Fatalf("reply %+v", got)
		}
		if readFile(t, e.path("multi/a.txt")) != "A" || readFile(t, e.path("multi/deep/b.txt")) != "B" {
			t.Fatal("content differs")
		}
		if _, err := os.Stat(e.path("multi/ignored.txt")); !os.IsNotExist(err) {
			t.Fatalf("part not named file was written: %v", err)
		}
	})

	t.Run("multipart to path", func(t *testing.T) {
		ct, body := multipartBody(t, [3]string{"file", "blob", "to path"})
		got := decodeUploaded(t, e.post(t, e.url("/files", "path", "named/target.txt"), ct, body))
		if len(got) != 1 || got[0].Path != e.path("named/target.txt") || readFile(t, e.path("named/target.txt")) != "to path" {
			t.Fatalf("reply %+v", got)
		}
	})

	t.Run("duplicate destination", func(t *testing.T) {
		ct, body := multipartBody(t, [3]string{"file", "dup/x.txt", "1"}, [3]string{"file", e.path("dup/x.txt"), "2"})
		wantError(t, e.post(t, e.url("/files"), ct, body), http.StatusBadRequest, e.path("dup/x.txt"), "more than once")
		if _, err := os.Stat(e.path("dup/x.txt")); !os.IsNotExist(err) {
			t.Fatalf("a failed upload wrote its first file: %v", err)
		}
		ct, body = multipartBody(t, [3]string{"file", "a", "1"}, [3]string{"file", "b", "2"})
		wantError(t, e.post(t, e.url("/files", "path", "dup/y.txt"), ct, body), http.StatusBadRequest, "more than once")
		if l := leftovers(t, e.root); len(l) > 0 {
			t.Fatalf("temporary files left: %v", l)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		wantError(t, e.post(t, e.url("/files", "path", "x"), "text/plain", strings.NewReader("x")), http.StatusBadRequest, `"text/plain"`)
		wantError(t, e.post(t, e.url("/files", "path", "x"), "", strings.NewReader("x")), http.StatusBadRequest, "Content-Type")
		wantError(t, e.post(t, e.url("/files"), "application/octet-stream", strings.NewReader("x")), http.StatusBadRequest, "path query parameter")
		ct, body := multipartBody(t, [3]string{"note", "", "x"})
		wantError(t, e.post(t, e.url("/files"), ct, body), http.StatusBadRequest, `no part named "file"`)
		ct, body = multipartBody(t, [3]string{"file", "", "x"})
		wantError(t, e.post(t, e.url("/files"), ct, body), http.StatusBadRequest, "no filename")
		wantError(t, e.post(t, e.url("/files"), "multipart/form-data", strings.NewReader("x")), http.StatusBadRequest, "boundary")
		wantError(t, e.post(t, e.url("/files"), "multipart/form-data; boundary=zz", strings.NewReader("garbage")), http.StatusBadRequest, "multipart")
		if err := os.MkdirAll(e.path("a-dir"), 0o755); err != nil {
			t.Fatal(err)
		}
		wantError(t, e.upload(t, "a-dir", "x"), http.StatusBadRequest, e.path("a-dir"), "is a directory")
		writeFile(t, e.path("plain"), "x", 0o644)
		wantError(t, e.upload(t, "plain/below", "x"), http.StatusBadRequest, e.path("plain/below"))
	})

	t.Run("overwrite keeps mode", func(t *testing.T) {
		writeFile(t, e.path("exec.sh"), "old", 0o750)
		decodeUploaded(t, e.upload(t, "exec.sh", "#!/bin/sh\necho new\n"))
		info, err := os.Stat(e.path("exec.sh"))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o750 || readFile(t, e.path("exec.sh")) != "#!/bin/sh\necho new\n" {
			t.Fatalf("mode %v", info.Mode())
		}
		decodeUploaded(t, e.upload(t, "fresh.txt", "new"))
		if info, _ := os.Stat(e.path("fresh.txt")); info.Mode().Perm() != 0o644 {
			t.Fatalf("new file mode %v, want 0644", info.Mode())
		}
	})

	t.Run("through symlink", func(t *testing.T) {
		writeFile(t, e.path("real.txt"), "old", 0o644)
		if err := os.Symlink("real.txt", e.path("link.txt")); err != nil {
			t.Fatal(err)
		}
		decodeUploaded(t, e.upload(t, "link.txt", "via link"))
		if info, err := os.Lstat(e.path("link.txt")); err != nil || info.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("link replaced: %v %v", info, err)
		}
		if readFile(t, e.path("real.txt")) != "via link" {
			t.Fatal("target not written")
		}
	})

	t.Run("unknown user is not refused", func(t *testing.T) {
		res := e.post(t, e.url("/files", "path", "anyone.txt", "username", "no-such-user-xyz"), "application/octet-stream", strings.NewReader("x"))
		decodeUploaded(t, res)
	})
}

// TestUploadOwnership: uploading as another user (the daemon is root)
// creates the file and its new parents owned by that user.
func TestUploadOwnership(t *testing.T) {
	testenv.RequireRoot(t)
	nobody := testenv.RequireUser(t, "nobody")
	e := newEnv(t)
	if err := os.Mkdir(e.path("kept"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := e.post(t, e.url("/files", "path", "kept/new/dir/f.txt", "username", "nobody"), "application/octet-stream", strings.NewReader("x"))
	decodeUploaded(t, res)
	for rel, want := range map[string]string{"kept": "0", "kept/new": nobody.Uid, "kept/new/dir": nobody.Uid, "kept/new/dir/f.txt": nobody.Uid} {
		info, err := os.Stat(e.path(rel))
		if err != nil {
			t.Fatal(err)
		}
		if uid := strconv.Itoa(int(info.Sys().(*syscall.Stat_t).Uid)); uid != want {
			t.Errorf("%s owned by %s, want %s", rel, uid, want)
		}
	}
}

// TestUploadDiskFull: a 1 MiB tmpfs fills up; the reply is 507 and the file
// that was there survives intact.
func TestUploadDiskFull(t *testing.T) {
	e := newEnv(t)
	mountTmpfs(t, e.path("small"), "1m")
	decodeUploaded(t, e.upload(t, "small/keep.txt", "precious"))

	big := strings.Repeat("x", 2<<20)
	wantError(t, e.upload(t, "small/keep.txt", big), http.StatusInsufficientStorage, "not enough disk space", e.path("small/keep.txt"))
	ct, body := multipartBody(t, [3]string{"file", "small/other.bin", big})
	wantError(t, e.post(t, e.url("/files"), ct, body), http.StatusInsufficientStorage, "not enough disk space")

	if got := readFile(t, e.path("small/keep.txt")); got != "precious" {
		t.Fatalf("existing file now %d bytes", len(got))
	}
	if _, err := os.Stat(e.path("small/other.bin")); !os.IsNotExist(err) {
		t.Fatalf("failed upload left its file: %v", err)
	}
	if l := leftovers(t, e.root); len(l) > 0 {
		t.Fatalf("temporary files left: %v", l)
	}
	// The space is free again: a small upload works.
	decodeUploaded(t, e.upload(t, "small/after.txt", "ok"))
}

func TestUploadTooLarge(t *testing.T) {
	const limit = 1024
	e := newEnv(t, func(o *rest.Options) { o.MaxUploadBytes = limit })

	decodeUploaded(t, e.upload(t, "exact.bin", strings.Repeat("a", limit)))

	wantError(t, e.upload(t, "known.bin", strings.Repeat("a", 4*limit)), http.StatusRequestEntityTooLarge, "1024")

	// Unknown length: the limit trips while streaming.
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, strings.NewReader(strings.Repeat("b", 64*limit)))
		pw.CloseWithError(err)
	}()
	wantError(t, e.post(t, e.url("/files", "path", "chunked.bin"), "application/octet-stream", pr), http.StatusRequestEntityTooLarge, "1024")

	// A small gzip body that inflates past the limit.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(bytes.Repeat([]byte{0}, 64*limit))
	_ = zw.Close()
	if buf.Len() >= limit {
		t.Fatalf("test body compresses to %d bytes, not under the limit", buf.Len())
	}
	wantError(t, e.post(t, e.url("/files", "path", "bomb.bin"), "application/octet-stream", &buf, "Content-Encoding", "gzip"), http.StatusRequestEntityTooLarge, "larger than the limit of 1024 bytes")
	// One that inflates to exactly the limit is fine.
	buf.Reset()
	zw = gzip.NewWriter(&buf)
	_, _ = zw.Write(bytes.Repeat([]byte{'z'}, limit))
	_ = zw.Close()
	decodeUploaded(t, e.post(t, e.url("/files", "path", "gz-exact.bin"), "application/octet-stream", &buf, "Content-Encoding", "gzip"))
	if b, err := os.ReadFile(e.path("gz-exact.bin")); err != nil || len(b) != limit {
		t.Fatalf("gzip body of exactly the limit: %d bytes stored, %v", len(b), err)
	}

	ct, body := multipartBody(t, [3]string{"file", "mp.bin", strings.Repeat("c", 4*limit)})
	wantError(t, e.post(t, e.url("/files"), ct, body), http.StatusRequestEntityTooLarge, "larger than the limit of 1024 bytes")

	for _, name := range []string{"known.bin", "chunked.bin", "bomb.bin", "mp.bin"} {
		if _, err := os.Stat(e.path(name)); !os.IsNotExist(err) {
			t.Errorf("%s exists after a rejected upload", name)
		}
	}
	if l := leftovers(t, e.root); len(l) > 0 {
		t.Fatalf("temporary files left: %v", l)
	}
}

func TestSignatureAuth(t *testing.T) {
	const token = "s3cret-token"
	e := newEnv(t, func(o *rest.Options) { o.AccessToken = token })
	writeFile(t, e.path("f.txt"), "data", 0o644)
	future := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)

	if got, want := rest.Signature("f.txt", rest.OperationRead, "user", token, 0), sign("f.txt", "read", "user", token, ""); got != want {
		t.Fatalf("Signature = %s, want %s", got, want)
	}
	if got, want := rest.Signature("f.txt", rest.OperationWrite, "", token, 1700000000), sign("f.txt", "write", "", token, "1700000000"); got != want {
		t.Fatalf("Signature with expiry = %s, want %s", got, want)
	}

	get := func(headers []string, kv ...string) response {
		return e.get(t, e.url("/files", append([]string{"path", "f.txt"}, kv...)...), headers...)
	}
	wantStatus(t, get([]string{"X-Access-Token", token}), http.StatusOK)
	wantError(t, get([]string{"X-Access-Token", "wrong"}), http.StatusUnauthorized, "valid access token")
	wantError(t, get(nil), http.StatusUnauthorized, "missing signature query parameter")
	wantStatus(t, get(nil, "signature", sign("f.txt", "read", "", token, "")), http.StatusOK)
	wantStatus(t, get(nil, "username", "user", "signature", sign("f.txt", "read", "user", token, "")), http.StatusOK)
	// A wrong token in the header does not spoil a valid signature.
	wantStatus(t, get([]string{"X-Access-Token", "wrong"}, "signature", sign("f.txt", "read", "", token, "")), http.StatusOK)
	wantError(t, get(nil, "username", "other", "signature", sign("f.txt", "read", "user", token, "")), http.StatusUnauthorized, "invalid signature")
	wantError(t, get(nil, "signature", sign("f.txt", "write", "", token, "")), http.StatusUnauthorized, "invalid signature")
	wantError(t, get(nil, "signature", sign("f.txt", "read", "", "other-token", "")), http.StatusUnauthorized, "invalid signature")
	wantError(t, get(nil, "signature", "v1_garbage"), http.StatusUnauthorized, "invalid signature")
	wantStatus(t, get(nil, "signature", sign("f.txt", "read", "", token, future), "signature_expiration", future), http.StatusOK)
	wantError(t, get(nil, "signature", sign("f.txt", "read", "", token, past), "signature_expiration", past), http.StatusUnauthorized, "signature is already expired")
	wantError(t, get(nil, "signature", sign("f.txt", "read", "", token, past), "signature_expiration", future), http.StatusUnauthorized, "invalid signature")
	wantError(t, get(nil, "signature", sign("f.txt", "read", "", token, ""), "signature_expiration", "soon"), http.StatusBadRequest, `"soon"`)

	// Uploads need a write signature.
	post := func(headers []string, kv ...string) response {
		return e.post(t, e.url("/files", append([]string{"path", "up.txt"}, kv...)...), "application/octet-stream", strings.NewReader("up"), headers...)
	}
	decodeUploaded(t, post(nil, "signature", sign("up.txt", "write", "", token, future), "signature_expiration", future))
	decodeUploaded(t, post([]string{"X-Access-Token", token}))
	wantError(t, post(nil, "signature", sign("up.txt", "read", "", token, "")), http.StatusUnauthorized, "invalid signature")
	wantError(t, post(nil), http.StatusUnauthorized, "missing signature query parameter")

	// /health needs nothing; the daemon's middleware guards the rest.
	wantStatus(t, e.get(t, e.url("/health")), http.StatusNoContent)
}

// TestConfinement: every endpoint refuses paths outside the root, and
// nothing outside it is written.
func TestConfinement(t *testing.T) {
	e := newEnv(t)
	outside := e.base + "/outside.txt"
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.base, e.path("escape")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{outside, "../outside.txt", "escape/outside.txt", "/etc/passwd"} {
		wantError(t, e.get(t, e.url("/files", "path", p)), http.StatusForbidden, p)
		wantError(t, e.upload(t, p, "overwrite"), http.StatusForbidden, p)
		ct, body := multipartBody(t, [3]string{"file", p, "overwrite"})
		wantError(t, e.post(t, e.url("/files"), ct, body), http.StatusForbidden, p)
		compose := func(sources []string, dest string) response {
			b, _ := json.Marshal(map[string]any{"source_paths": sources, "destination": dest})
			return e.post(t, e.url("/files/compose"), "application/json", bytes.NewReader(b))
		}
		writeFile(t, e.path("part"), "p", 0o644)
		wantError(t, compose([]string{p}, "joined"), http.StatusForbidden, p)
		wantError(t, compose([]string{"part"}, p), http.StatusForbidden, p)
	}
	for _, p := range []string{"escape/new.txt", "../new.txt"} {
		wantError(t, e.upload(t, p, "x"), http.StatusForbidden, p)
	}
	if got := readFile(t, outside); got != "secret" {
		t.Fatalf("outside file changed: %q", got)
	}
	entries, _ := os.ReadDir(e.base)
	if len(entries) != 2 {
		t.Fatalf("base dir holds %d entries, want root and outside.txt", len(entries))
	}
}

// TestMetadata: X-Metadata-* headers become xattrs that Stat reports; each
// upload replaces them; invalid metadata is refused.
func TestMetadata(t *testing.T) {
	e := newEnv(t)
	res := e.upload(t, "meta.txt", "x", "X-Metadata-Author", "alice", "x-metadata-build-id", "42")
	got := decodeUploaded(t, res)
	want := map[string]string{"author": "alice", "build-id": "42"}
	if len(got) != 1 || fmt.Sprint(got[0].Metadata) != fmt.Sprint(want) {
		t.Fatalf("reply %+v", got)
	}
	stat := func() map[string]string {
		res, err := e.fs.Stat(t.Context(), connect.NewRequest(&filesystem.StatRequest{Path: "meta.txt"}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetEntry().GetMetadata()
	}
	if md := stat(); fmt.Sprint(md) != fmt.Sprint(want) {
		t.Fatalf("Stat metadata %v, want %v", md, want)
	}
	decodeUploaded(t, e.upload(t, "meta.txt", "y", "X-Metadata-Stage", "two"))
	if md := stat(); fmt.Sprint(md) != fmt.Sprint(map[string]string{"stage": "two"}) {
		t.Fatalf("Stat metadata after re-upload %v", md)
	}
	decodeUploaded(t, e.upload(t, "meta.txt", "z"))
	if md := stat(); len(md) != 0 {
		t.Fatalf("Stat metadata after upload without headers %v", md)
	}

	wantError(t, e.upload(t, "m2.txt", "x", "X-Metadata-Name", "café"), http.StatusBadRequest, `"name"`, "printable ASCII")
	long := strings.Repeat("k", 247)
	wantError(t, e.upload(t, "m2.txt", "x", "X-Metadata-"+long, "v"), http.StatusBadRequest, "246")
	headers := []string{}
	for i := range 20 {
		headers = append(headers, fmt.Sprintf("X-Metadata-K%d", i), strings.Repeat("v", 250))
	}
	wantError(t, e.upload(t, "m2.txt", "x", headers...), http.StatusBadRequest, "4096")
	if _, err := os.Stat(e.path("m2.txt")); !os.IsNotExist(err) {
		t.Fatalf("refused upload wrote its file: %v", err)
	}
}

func TestCompose(t *testing.T) {
	e := newEnv(t)
	compose := func(v any) response {
		b, _ := json.Marshal(v)
		return e.post(t, e.url("/files/compose"), "application/json", bytes.NewReader(b))
	}
	for i, s := range []string{"one ", "two ", "three"} {
		writeFile(t, e.path(fmt.Sprintf("parts/%d", i)), s, 0o644)
	}
	res := compose(map[string]any{"source_paths": []string{"parts/0", "parts/1", e.path("parts/2")}, "destination": "out/joined.txt"})
	wantStatus(t, res, http.StatusOK)
	var got uploaded
	if err := json.Unmarshal(res.body, &got); err != nil || got.Path != e.path("out/joined.txt") || got.Name != "joined.txt" || got.Type != "file" {
		t.Fatalf("reply %s (%v)", res.body, err)
	}
	if readFile(t, e.path("out/joined.txt")) != "one two three" {
		t.Fatal("content differs")
	}
	for i := range 3 {
		if _, err := os.Stat(e.path(fmt.Sprintf("parts/%d", i))); !os.IsNotExist(err) {
			t.Fatalf("source %d not deleted", i)
		}
	}

	// The destination may be one of the sources.
	writeFile(t, e.path("acc"), "head-", 0o644)
	writeFile(t, e.path("tail"), "tail", 0o644)
	wantStatus(t, compose(map[string]any{"source_paths": []string{"acc", "tail"}, "destination": "acc"}), http.StatusOK)
	if readFile(t, e.path("acc")) != "head-tail" {
		t.Fatal("append-style compose differs")
	}
	if _, err := os.Stat(e.path("tail")); !os.IsNotExist(err) {
		t.Fatal("tail not deleted")
	}

	writeFile(t, e.path("keep"), "k", 0o644)
	wantError(t, compose(map[string]any{"source_paths": []string{"keep", "missing"}, "destination": "x"}), http.StatusNotFound, e.path("missing"))
	wantError(t, compose(map[string]any{"source_paths": []string{"keep", "out"}, "destination": "x"}), http.StatusBadRequest, e.path("out"))
	wantError(t, compose(map[string]any{"source_paths": []string{}, "destination": "x"}), http.StatusBadRequest, "source_paths")
	wantError(t, compose(map[string]any{"source_paths": []string{"keep"}}), http.StatusBadRequest, "destination")
	wantError(t, compose(map[string]any{"source_paths": []string{"keep"}, "destination": "out"}), http.StatusBadRequest, e.path("out"), "is a directory")
	wantError(t, e.post(t, e.url("/files/compose"), "application/json", strings.NewReader("{")), http.StatusBadRequest, "JSON")
	if readFile(t, e.path("keep")) != "k" {
		t.Fatal("a failed compose removed a source")
	}
}

func TestComposeDiskFull(t *testing.T) {
	e := newEnv(t)
	mountTmpfs(t, e.path("small"), "1m")
	writeFile(t, e.path("a"), strings.Repeat("a", 700<<10), 0o644)
	writeFile(t, e.path("b"), strings.Repeat("b", 700<<10), 0o644)
	b, _ := json.Marshal(map[string]any{"source_paths": []string{"a", "b"}, "destination": "small/ab"})
	res := e.post(t, e.url("/files/compose"), "application/json", bytes.NewReader(b))
	wantError(t, res, http.StatusInsufficientStorage, "not enough disk space", e.path("small/ab"))
	for _, p := range []string{"a", "b"} {
		if _, err := os.Stat(e.path(p)); err != nil {
			t.Fatalf("source %s gone after a failed compose: %v", p, err)
		}
	}
	if l := leftovers(t, e.root); len(l) > 0 {
		t.Fatalf("temporary files left: %v", l)
	}
}

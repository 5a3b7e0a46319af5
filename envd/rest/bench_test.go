//go:build linux

package rest_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"testing"
)

// BenchmarkUpload50MiB measures POST /files throughput over a real loopback
// HTTP server for a 50 MiB random file. B/op covers client and server: it
// stays far below the file size because the server streams to disk.
func BenchmarkUpload50MiB(b *testing.B) {
	e := newEnv(b)
	data, err := io.ReadAll(randomData(7, bigSize))
	if err != nil {
		b.Fatal(err)
	}
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	w, _ := mw.CreateFormFile("file", "bench/multipart.bin")
	_, _ = w.Write(data)
	_ = mw.Close()

	run := func(b *testing.B, url, contentType string, body []byte, headers ...string) {
		b.SetBytes(bigSize)
		b.ReportAllocs()
		for b.Loop() {
			res := e.post(b, url, contentType, bytes.NewReader(body), headers...)
			if res.StatusCode != http.StatusOK {
				b.Fatalf("status %d: %s", res.StatusCode, res.body)
			}
		}
	}
	b.Run("octet-stream", func(b *testing.B) {
		run(b, e.url("/files", "path", "bench/octet.bin"), "application/octet-stream", data)
	})
	b.Run("multipart", func(b *testing.B) {
		run(b, e.url("/files"), mw.FormDataContentType(), mp.Bytes())
	})
	b.Run("octet-stream-gzip", func(b *testing.B) {
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
		_, _ = zw.Write(data)
		_ = zw.Close()
		run(b, e.url("/files", "path", "bench/gz.bin"), "application/octet-stream", gz.Bytes(), "Content-Encoding", "gzip")
	})
}

// BenchmarkDownload50MiB measures GET /files throughput for a 50 MiB random
// file, plain (sendfile) and gzip-encoded on the fly.
func BenchmarkDownload50MiB(b *testing.B) {
	e := newEnv(b)
	f, err := os.Create(e.path("bench.bin"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, randomData(8, bigSize)); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, acceptEncoding string) {
		b.SetBytes(bigSize)
		b.ReportAllocs()
		var wire int64
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodGet, e.url("/files", "path", "bench.bin"), nil)
			req.Header.Set("Accept-Encoding", acceptEncoding)
			res, err := e.client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != http.StatusOK {
				b.Fatalf("status %d, %v", res.StatusCode, err)
			}
			wire = n
		}
		b.ReportMetric(float64(wire)/bigSize, "wire/file")
	}
	b.Run("identity", func(b *testing.B) { run(b, "identity") })
	b.Run("gzip", func(b *testing.B) { run(b, "gzip") })
}

//go:build linux

package rest

import (
	"compress/gzip"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/fsrpc"
)

// download serves GET /files?path=&username=. The file streams through
// http.ServeContent, so Range (206), If-Modified-Since (304) and HEAD work.
// With Accept-Encoding allowing gzip the body is gzip-compressed on the fly;
// then the whole file is sent (Range is ignored) because byte ranges of a
// compressed stream are not ranges of the file.
func (s *server) download(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, OperationRead); err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	u := s.users.Lookup(q.Get("username"))
	p, err := s.resolve(q.Get("path"), u)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	encoding, ok := negotiateEncoding(r.Header.Values("Accept-Encoding"))
	if !ok {
		s.fail(w, r, errorf(http.StatusNotAcceptable,
			"Accept-Encoding %s allows neither gzip nor identity, the only encodings served", quoteShort(strings.Join(r.Header.Values("Accept-Encoding"), ", "))))
		return
	}

	// Stat before opening: opening a FIFO would block.
	info, err := os.Stat(p)
	if err != nil {
		s.fail(w, r, openError(err, p))
		return
	}
	if info.IsDir() {
		s.fail(w, r, errorf(http.StatusBadRequest, "path '%s' is a directory", p))
		return
	}
	if !info.Mode().IsRegular() {
		s.fail(w, r, errorf(http.StatusBadRequest, "path '%s' is not a regular file", p))
		return
	}
	f, err := os.Open(p)
	if err != nil {
		s.fail(w, r, openError(err, p))
		return
	}
	defer f.Close()

	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(p)}))
	h.Add("Vary", "Accept-Encoding")
	dw := &downloadWriter{ResponseWriter: w, gzip: encoding == "gzip" && r.Method != http.MethodHead}
	if encoding == "gzip" {
		r.Header.Del("Range")
		r.Header.Del("If-Range")
	}
	http.ServeContent(dw, r, filepath.Base(p), info.ModTime(), f)
	dw.finish()
}

// openError maps an error opening path for reading to a status.
func openError(err error, p string) error {
	switch code := fsrpc.CodeOf(err); code {
	case connect.CodeNotFound:
		return errorf(http.StatusNotFound, "path '%s' does not exist", p)
	case connect.CodePermissionDenied:
		return errorf(http.StatusForbidden, "path '%s' is not readable: %s", p, fsrpc.RootCause(err))
	default:
		return errorf(statusOf(code), "open '%s': %s", p, fsrpc.RootCause(err))
	}
}

// negotiateEncoding picks "gzip" or "identity" from Accept-Encoding values
// (RFC 9110 §12.5.3). No header means identity. A named gzip with q > 0 is
// preferred unless identity is named with a higher weight; identity stays
// acceptable unless refused by "identity;q=0" or by "*;q=0" without identity
// listed; a bare "*" gets identity. ok is false when neither is acceptable.
func negotiateEncoding(values []string) (encoding string, ok bool) {
	if len(values) == 0 {
		return "identity", true
	}
	gzipQ, identityQ, starQ := -1.0, -1.0, -1.0
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			q := 1.0
			for param := range strings.SplitSeq(params, ";") {
				k, val, found := strings.Cut(strings.TrimSpace(param), "=")
				if !found || !strings.EqualFold(strings.TrimSpace(k), "q") {
					continue
				}
				n, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || n < 0 || n > 1 {
					n = 0 // a malformed weight accepts nothing
				}
				q = n
			}
			switch name {
			case "gzip", "x-gzip":
				gzipQ = max(gzipQ, q)
			case "identity":
				identityQ = max(identityQ, q)
			case "*":
				starQ = max(starQ, q)
			}
		}
	}
	gzipNamed := gzipQ >= 0
	if !gzipNamed {
		gzipQ = max(starQ, 0)
	}
	if identityQ < 0 {
		// Not named: acceptable (unless "*;q=0"), but ranked below any
		// coding the client did name.
		identityQ = 0.0001
		if starQ >= 0 {
			identityQ = starQ
		}
	}
	switch {
	case gzipQ > 0 && (gzipQ > identityQ || (gzipQ == identityQ && gzipNamed)):
		return "gzip", true
	case identityQ > 0:
		return "identity", true
	case gzipQ > 0:
		return "gzip", true
	}
	return "", false
}

// gzipWriters recycles compressors; each holds about 800 KiB of state.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return zw
}}

// downloadWriter sits between http.ServeContent and the client. It
// compresses 200 responses when gzip was negotiated, and rewrites the plain
// text errors ServeContent produces (416, 412, …) into the JSON error shape.
type downloadWriter struct {
	http.ResponseWriter
	gzip bool

	status  int
	zw      *gzip.Writer
	errBody []byte
}

func (d *downloadWriter) WriteHeader(code int) {
	if d.status != 0 {
		return
	}
	d.status = code
	if code >= 400 {
		return // finish writes the JSON error
	}
	if d.gzip && code == http.StatusOK {
		h := d.Header()
		h.Del("Content-Length")
		h.Del("Accept-Ranges")
		h.Set("Content-Encoding", "gzip")
		d.zw = gzipWriters.Get().(*gzip.Writer)
		d.zw.Reset(d.ResponseWriter)
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *downloadWriter) Write(p []byte) (int, error) {
	if d.status == 0 {
		d.WriteHeader(http.StatusOK)
	}
	switch {
	case d.status >= 400:
		if room := 512 - len(d.errBody); room > 0 {
			d.errBody = append(d.errBody, p[:min(room, len(p))]...)
		}
		return len(p), nil
	case d.zw != nil:
		return d.zw.Write(p)
	}
	return d.ResponseWriter.Write(p)
}

// ReadFrom keeps the server's sendfile path for uncompressed bodies.
func (d *downloadWriter) ReadFrom(src io.Reader) (int64, error) {
	if d.status == 0 {
		d.WriteHeader(http.StatusOK)
	}
	if rf, ok := d.ResponseWriter.(io.ReaderFrom); ok && d.status < 400 && d.zw == nil {
		return rf.ReadFrom(src)
	}
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	return io.CopyBuffer(writerOnly{d}, src, *buf)
}

// writerOnly hides ReadFrom so io.CopyBuffer does not loop back into it.
type writerOnly struct{ io.Writer }

// finish completes the response: the gzip trailer, or the JSON error.
func (d *downloadWriter) finish() {
	if d.zw != nil {
		_ = d.zw.Close()
		d.zw.Reset(io.Discard)
		gzipWriters.Put(d.zw)
		d.zw = nil
	}
	if d.status >= 400 {
		msg := strings.TrimSpace(string(d.errBody))
		if msg == "" {
			msg = http.StatusText(d.status)
		}
		WriteError(d.ResponseWriter, d.status, msg)
	}
}

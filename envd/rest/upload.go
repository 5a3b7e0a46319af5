//go:build linux

package rest

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/fsrpc"
	"github.com/sandbox-mcp/sandbox-mcp/envd/identity"
)

// Metadata limits, as E2B's envd enforces them: the key fits an xattr name
// once "user.e2b." is prepended (255 bytes), and all keys and values together
// stay within 4 KiB.
const (
	metadataHeaderPrefix = "x-metadata-"
	maxMetadataKey       = 255 - len(fsrpc.MetadataPrefix)
	maxMetadataTotal     = 4096
)

// fileMode is the mode of uploaded files that did not exist before.
const fileMode = 0o644

// uploadedFile is one element of the POST /files reply and the POST
// /files/compose reply (E2B's EntryInfo of envd.yaml).
type uploadedFile struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// copyBuffers recycles the buffers files are streamed through, so memory per
// upload is bounded whatever the file size.
var copyBuffers = sync.Pool{New: func() any {
	b := make([]byte, 256<<10)
	return &b
}}

// upload serves POST /files. The body is multipart/form-data (parts named
// "file"; without a `path` query parameter each part's filename is its
// destination) or application/octet-stream (to `path`), optionally
// Content-Encoding gzip. Each file is written to a temporary name beside its
// destination and renamed into place only after the whole request body was
// read, so a failed request leaves existing files as they were (directories
// created for it may remain). An existing file keeps its mode; a symlink at
// the destination is written through. X-Metadata-<key> headers become the
// files' user.e2b.<key> xattrs (keys lower-cased: HTTP header names have no
// case), replacing any metadata the old file had.
func (s *server) upload(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, OperationWrite); err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	u := s.users.Lookup(q.Get("username"))
	metadata, err := parseMetadata(r.Header)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	contentType := r.Header.Get("Content-Type")
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil || (mediaType != "multipart/form-data" && mediaType != "application/octet-stream") {
		s.fail(w, r, errorf(http.StatusBadRequest, "unsupported Content-Type %s: use multipart/form-data or application/octet-stream", quoteShort(contentType)))
		return
	}
	dest := q.Get("path")
	if mediaType == "application/octet-stream" && dest == "" {
		s.fail(w, r, errorf(http.StatusBadRequest, "the path query parameter is required for application/octet-stream uploads"))
		return
	}
	body, err := s.requestBody(w, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}

	tx := &uploadTx{s: s, u: u, metadata: metadata, targets: map[string]bool{}}
	defer tx.abort()
	if mediaType == "application/octet-stream" {
		err = tx.stage(dest, body)
	} else {
		err = tx.stageMultipart(body, params["boundary"], dest)
	}
	if err == nil {
		err = tx.commit()
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]uploadedFile, 0, len(tx.files))
	for _, f := range tx.files {
		out = append(out, uploadedFile{Path: f.shown, Name: filepath.Base(f.shown), Type: "file", Metadata: metadata})
	}
	writeJSON(w, http.StatusOK, out)
}

// requestBody returns the upload body with the size limit applied (as sent
// and, for gzip, decoded) and the content encoding removed.
func (s *server) requestBody(w http.ResponseWriter, r *http.Request) (io.Reader, error) {
	var body io.Reader = r.Body
	if s.maxUpload > 0 {
		if r.ContentLength > s.maxUpload {
			return nil, s.tooLarge()
		}
		body = http.MaxBytesReader(w, r.Body, s.maxUpload)
	}
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			if e := s.readError(err); e.status == http.StatusRequestEntityTooLarge {
				return nil, e
			}
			return nil, errorf(http.StatusBadRequest, "the gzip request body is invalid: %s", err)
		}
		if s.maxUpload > 0 {
			return http.MaxBytesReader(w, io.NopCloser(zr), s.maxUpload), nil
		}
		return zr, nil
	default:
		return nil, errorf(http.StatusBadRequest, "unsupported Content-Encoding %s: use gzip or none", quoteShort(enc))
	}
}

func (s *server) tooLarge() *httpError {
	return errorf(http.StatusRequestEntityTooLarge, "request body is larger than the limit of %d bytes", s.maxUpload)
}

// readError maps a failure reading the request body.
func (s *server) readError(err error) *httpError {
	var he *httpError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &he):
		return he
	case errors.As(err, &mbe):
		return s.tooLarge()
	case errors.Is(err, gzip.ErrHeader), errors.Is(err, gzip.ErrChecksum):
		return errorf(http.StatusBadRequest, "the gzip request body is invalid: %s", err)
	}
	return errorf(http.StatusBadRequest, "reading the request body: %s", err)
}

// writeError maps a failure writing p.
func writeError(err error, p string) error {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	cause := fsrpc.RootCause(err)
	code := fsrpc.CodeOf(err)
	if code == connect.CodeResourceExhausted {
		return errorf(http.StatusInsufficientStorage, "not enough disk space to write '%s': %s", p, cause)
	}
	return errorf(statusOf(code), "cannot write '%s': %s", p, cause)
}

// parseMetadata collects X-Metadata-<key> headers. Keys are lower-cased,
// keys and values must be printable ASCII, a key at most maxMetadataKey bytes
// and everything together at most maxMetadataTotal bytes.
func parseMetadata(h http.Header) (map[string]string, error) {
	var md map[string]string
	total := 0
	for name, values := range h {
		lower := strings.ToLower(name)
		key, ok := strings.CutPrefix(lower, metadataHeaderPrefix)
		if !ok {
			continue
		}
		switch {
		case key == "":
			return nil, errorf(http.StatusBadRequest, "metadata header %s has an empty key", quoteShort(name))
		case len(key) > maxMetadataKey:
			return nil, errorf(http.StatusBadRequest, "metadata key %s is longer than %d bytes", quoteShort(key), maxMetadataKey)
		case !printableASCII(key, '!'):
			return nil, errorf(http.StatusBadRequest, "metadata key %s must be printable ASCII", quoteShort(key))
		case len(values) != 1:
			return nil, errorf(http.StatusBadRequest, "metadata key %s is given %d times", quoteShort(key), len(values))
		case !printableASCII(values[0], ' '):
			return nil, errorf(http.StatusBadRequest, "metadata value of %s must be printable ASCII", quoteShort(key))
		}
		if _, dup := md[key]; dup {
			return nil, errorf(http.StatusBadRequest, "metadata key %s is given twice", quoteShort(key))
		}
		total += len(key) + len(values[0])
		if total > maxMetadataTotal {
			return nil, errorf(http.StatusBadRequest, "metadata is larger than %d bytes in total (at key %s)", maxMetadataTotal, quoteShort(key))
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = values[0]
	}
	return md, nil
}

// stagedFile is a complete temporary file waiting to be renamed into place.
type stagedFile struct {
	tmp   string // temporary file beside final
	final string // where it goes: the destination, a symlink there resolved
	shown string // the destination as reported to the client
}

// uploadTx writes the files of one request to temporary names and renames
// them into place together at the end. It is not safe for concurrent use.
type uploadTx struct {
	s        *server
	u        identity.User
	metadata map[string]string
	files    []*stagedFile
	targets  map[string]bool // final paths already in this request
	done     bool
}

// stageMultipart stages every part named "file". dest, when set, is the
// destination of every such part (so two parts are a duplicate); otherwise
// each part's filename is its destination.
func (tx *uploadTx) stageMultipart(body io.Reader, boundary, dest string) error {
	if boundary == "" {
		return errorf(http.StatusBadRequest, "multipart/form-data Content-Type without a boundary")
	}
	// A larger read buffer than multipart's own 4 KiB lets it scan for the
	// boundary in bigger steps (multipart reuses a big enough *bufio.Reader).
	mr := multipart.NewReader(bufio.NewReaderSize(body, 64<<10), boundary)
	parts := 0
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if e := tx.s.readError(err); e.status == http.StatusRequestEntityTooLarge {
				return e
			}
			return errorf(http.StatusBadRequest, "malformed multipart body: %s", err)
		}
		if part.FormName() != "file" {
			continue // other fields are ignored; NextPart skips their bodies
		}
		parts++
		target := dest
		if target == "" {
			// Part.FileName keeps only the base name; the SDKs put the whole
			// destination path there, so read the raw parameter.
			_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			target = params["filename"]
			if target == "" {
				return errorf(http.StatusBadRequest, "part %d named \"file\" has no filename and there is no path query parameter", parts)
			}
		}
		if err := tx.stage(target, part); err != nil {
			return err
		}
	}
	if parts == 0 {
		return errorf(http.StatusBadRequest, "the multipart body has no part named \"file\"")
	}
	return nil
}

// stage streams src into a temporary file for the client path dest.
func (tx *uploadTx) stage(dest string, src io.Reader) error {
	s := tx.s
	if !utf8.ValidString(dest) {
		// The reply is JSON, which cannot carry the name faithfully.
		return errorf(http.StatusBadRequest, "destination path %s is not valid UTF-8", quoteShort(dest))
	}
	shown, err := s.resolve(dest, tx.u)
	if err != nil {
		return err
	}
	final, mode, err := prepareTarget(shown)
	if err != nil {
		return err
	}
	if tx.targets[final] {
		return errorf(http.StatusBadRequest, "destination '%s' appears more than once in the upload", shown)
	}
	tx.targets[final] = true

	f, err := createTemp(final, tx.u)
	if err != nil {
		return writeError(err, shown)
	}
	staged := &stagedFile{tmp: f.Name(), final: final, shown: shown}
	tx.files = append(tx.files, staged)
	if err := fill(f, src, mode, tx.u, tx.metadata); err != nil {
		f.Close()
		return tx.fillError(err, shown)
	}
	if err := f.Close(); err != nil {
		return writeError(err, shown)
	}
	return nil
}

func (tx *uploadTx) fillError(err error, shown string) error {
	var re *readErr
	if errors.As(err, &re) {
		return tx.s.readError(re.err)
	}
	return writeError(err, shown)
}

// commit renames every staged file into place.
func (tx *uploadTx) commit() error {
	for i, f := range tx.files {
		placeholder := announce(f.final)
		if err := os.Rename(f.tmp, f.final); err != nil {
			if placeholder {
				_ = os.Remove(f.final)
			}
			// Those already renamed stay; the rest are removed by abort.
			tx.files = tx.files[i:]
			return writeError(err, f.shown)
		}
	}
	tx.done = true
	return nil
}

// announce creates an empty file at final when nothing is there, so a
// watcher sees CREATE for a new file and then (for the rename onto it)
// WRITE, as E2B's envd, which writes in place, shows an upload. It
// reports whether it created one.
func announce(final string) bool {
	f, err := os.OpenFile(final, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

// abort removes the temporary files of an unfinished transaction.
func (tx *uploadTx) abort() {
	if tx.done {
		return
	}
	for _, f := range tx.files {
		_ = os.Remove(f.tmp)
	}
}

// prepareTarget checks a destination and creates its parents. It returns the
// path to rename onto (a symlink at shown resolved to its target, so the
// link survives) and the mode for the new file (an existing file's, else
// fileMode).
func prepareTarget(shown string) (final string, mode fs.FileMode, err error) {
	final = shown
	if info, err := os.Lstat(shown); err == nil && info.Mode()&fs.ModeSymlink != 0 {
		if real, err := filepath.EvalSymlinks(shown); err == nil {
			final = real
		}
	}
	mode = fileMode
	switch info, err := os.Stat(final); {
	case err == nil && info.IsDir():
		return "", 0, errorf(http.StatusBadRequest, "path '%s' is a directory", shown)
	case err == nil && info.Mode().IsRegular():
		mode = info.Mode().Perm()
	case err == nil:
		return "", 0, errorf(http.StatusBadRequest, "path '%s' is not a regular file", shown)
	case errors.Is(err, syscall.ENOTDIR):
		return "", 0, errorf(http.StatusBadRequest, "cannot write '%s': a parent is not a directory", shown)
	}
	return final, mode, nil
}

// createTemp creates the parents of final (owned by u) and an empty
// temporary file beside it.
func createTemp(final string, u identity.User) (*os.File, error) {
	dir := filepath.Dir(final)
	if err := fsrpc.MkdirAll(dir, u); err != nil {
		return nil, err
	}
	// A name watches know (fsrpc reports the upload on final instead).
	return os.CreateTemp(dir, fsrpc.UploadTempPattern(filepath.Base(final)))
}

// readErr marks an error that came from the request body rather than the
// disk.
type readErr struct{ err error }

func (e *readErr) Error() string { return e.err.Error() }

// fill copies src into f and gives f its final mode, owner and metadata.
func fill(f *os.File, src io.Reader, mode fs.FileMode, u identity.User, metadata map[string]string) error {
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	for {
		// Fill the buffer before writing: multipart parts and sockets
		// return small reads, and one write per read costs a syscall each.
		n, rerr := io.ReadFull(src, *buf)
		if n > 0 {
			if _, err := f.Write((*buf)[:n]); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return &readErr{rerr}
		}
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if u.Switch {
		if err := f.Chown(int(u.UID), int(u.GID)); err != nil {
			return err
		}
	}
	return setMetadata(f, metadata)
}

// setMetadata stores metadata as user.e2b.* xattrs on f, in key order.
func setMetadata(f *os.File, metadata map[string]string) error {
	keys := make([]string, 0, len(metadata))
	for k := range metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		err := unix.Fsetxattr(int(f.Fd()), fsrpc.MetadataPrefix+k, []byte(metadata[k]), 0)
		if errors.Is(err, unix.ENOTSUP) {
			return errorf(http.StatusInternalServerError, "the filesystem of '%s' does not support metadata (user extended attributes)", filepath.Dir(f.Name()))
		}
		if err != nil {
			return fmt.Errorf("set metadata %q: %w", k, err)
		}
	}
	return nil
}

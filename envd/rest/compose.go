//go:build linux

package rest

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"

	"github.com/sandbox-mcp/sandbox-mcp/envd/fsrpc"
)

// maxComposeBody caps the JSON body of POST /files/compose.
const maxComposeBody = 1 << 20

// composeRequest is the body of POST /files/compose.
type composeRequest struct {
	SourcePaths []string `json:"source_paths"`
	Destination string   `json:"destination"`
	// Username, when set, overrides the username query parameter.
	Username *string `json:"username,omitempty"`
}

// compose serves POST /files/compose: concatenate source_paths, in order,
// into destination (written to a temporary name and renamed into place, so a
// failure leaves the destination as it was), then delete the sources. A
// source that is also the destination is not deleted. Missing sources are
// 404, directories 400, a full disk 507.
func (s *server) compose(w http.ResponseWriter, r *http.Request) {
	var req composeRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxComposeBody))
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.fail(w, r, errorf(http.StatusRequestEntityTooLarge, "compose request body is larger than %d bytes", maxComposeBody))
			return
		}
		s.fail(w, r, errorf(http.StatusBadRequest, "invalid compose request JSON: %s", err))
		return
	}
	if len(req.SourcePaths) == 0 {
		s.fail(w, r, errorf(http.StatusBadRequest, "source_paths is empty"))
		return
	}
	if req.Destination == "" {
		s.fail(w, r, errorf(http.StatusBadRequest, "destination is empty"))
		return
	}
	username := r.URL.Query().Get("username")
	if req.Username != nil {
		username = *req.Username
	}
	u := s.users.Lookup(username)

	sources := make([]string, len(req.SourcePaths))
	for i, sp := range req.SourcePaths {
		p, err := s.resolve(sp, u)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		info, err := os.Stat(p)
		switch {
		case err != nil:
			s.fail(w, r, openError(err, p))
			return
		case info.IsDir():
			s.fail(w, r, errorf(http.StatusBadRequest, "source '%s' is a directory", p))
			return
		case !info.Mode().IsRegular():
			s.fail(w, r, errorf(http.StatusBadRequest, "source '%s' is not a regular file", p))
			return
		}
		sources[i] = p
	}

	tx := &uploadTx{s: s, u: u, targets: map[string]bool{}}
	defer tx.abort()
	src := &concatReader{paths: sources}
	defer src.close()
	if err := tx.stage(req.Destination, src); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := tx.commit(); err != nil {
		s.fail(w, r, err)
		return
	}
	dest := tx.files[0]
	destInfo, destErr := os.Stat(dest.final)
	for _, p := range sources {
		if destErr == nil {
			if info, err := os.Stat(p); err == nil && os.SameFile(info, destInfo) {
				continue // the source was also the destination
			}
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.fail(w, r, errorf(http.StatusInternalServerError, "composed '%s' but could not remove source '%s': %s", dest.shown, p, fsrpc.RootCause(err)))
			return
		}
	}
	writeJSON(w, http.StatusOK, uploadedFile{Path: dest.shown, Name: filepath.Base(dest.shown), Type: "file"})
}

// concatReader reads the files in paths one after another. Open failures
// are reported as *httpError (a source vanished: 404), not as body errors.
type concatReader struct {
	paths []string
	cur   *os.File
}

func (c *concatReader) Read(p []byte) (int, error) {
	for {
		if c.cur == nil {
			if len(c.paths) == 0 {
				return 0, io.EOF
			}
			f, err := os.Open(c.paths[0])
			if err != nil {
				return 0, openError(err, c.paths[0])
			}
			c.cur = f
			c.paths = c.paths[1:]
		}
		n, err := c.cur.Read(p)
		if errors.Is(err, io.EOF) {
			c.cur.Close()
			c.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		if err != nil {
			return n, errorf(http.StatusInternalServerError, "read source '%s': %s", c.cur.Name(), fsrpc.RootCause(err))
		}
		return n, nil
	}
}

// close releases the file being read, if any.
func (c *concatReader) close() {
	if c.cur != nil {
		c.cur.Close()
		c.cur = nil
	}
}

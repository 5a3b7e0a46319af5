package server

import (
	"bytes"
	"io"
	"net/http"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// splitArguments is the HTTP side of tools.SplitToolCall: a POST whose body
// is a tools/call of one of our tools reaches mcp-go with "arguments":{},
// and the arguments reach the handler through the request's context (which
// mcp-go's calls derive from, for both protocol eras). Any other body passes
// unchanged.
func (s *Server) splitArguments(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := r.Context().Value(bodyKey{}).([]byte)
		if body == nil {
			var err error
			body, err = readBody(r.Body, r.ContentLength)
			if err != nil {
				// mcp-go answers the read error (limitBody turns one of
				// too large a body into 413).
				r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errorReader{err}))
				next.ServeHTTP(w, r)
				return
			}
		}
		if small, args, ok := tools.SplitToolCall(body, s.splitsArguments); ok {
			body = small
			r = r.WithContext(tools.WithArguments(r.Context(), args))
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// errorReader fails every read with err.
type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) { return 0, e.err }

// readBody reads r whole into one buffer sized by sizeHint (the request's
// Content-Length, or -1 when unknown), so a body is held once rather than
// through the doubling copies io.ReadAll makes as it grows.
func readBody(r io.Reader, sizeHint int64) ([]byte, error) {
	var buf bytes.Buffer
	if sizeHint > 0 {
		// bytes.MinRead spare: ReadFrom then never grows the buffer to learn
		// that the body has ended.
		buf.Grow(int(sizeHint) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

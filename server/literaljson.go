package server

import (
	"bytes"
	"net/http"
)

// mcp-go writes its HTTP responses with encoding/json's defaults, which
// escape <, > and & in every string as \u003c, \u003e and \u0026: a
// program's output, a file's text and a traceback (<module>) would reach the
// model escaped. literalJSON undoes exactly those three escapes in the
// bytes of the /mcp responses (JSON bodies and SSE events alike), which
// leaves the JSON equivalent.

// literalJSON serves next with its response's HTML escapes undone.
func literalJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lw := &literalWriter{ResponseWriter: w}
		defer lw.flushPending()
		next.ServeHTTP(lw, r)
	})
}

// literalWriter rewrites \u003c, \u003e and \u0026 escapes to the
// characters they stand for as the bytes pass. An escape split between two
// writes is held back (at most five bytes) until the next write, a flush or
// the end of the response.
type literalWriter struct {
	http.ResponseWriter
	pending []byte
}

// Write passes p on, unescaped; it reports all of p as written.
func (w *literalWriter) Write(p []byte) (int, error) {
	buf := p
	if len(w.pending) > 0 {
		buf = append(w.pending, p...)
		w.pending = nil
	}
	out, rest := unescapeHTML(buf)
	if len(rest) > 0 {
		w.pending = append([]byte(nil), rest...)
	}
	if len(out) == 0 {
		return len(p), nil
	}
	if _, err := w.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is held back and flushes the response.
func (w *literalWriter) Flush() {
	w.flushPending()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *literalWriter) flushPending() {
	if len(w.pending) > 0 {
		_, _ = w.ResponseWriter.Write(w.pending)
		w.pending = nil
	}
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *literalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// unescapeHTML returns b with the HTML escapes of its JSON strings undone,
// and the incomplete escape b ends with (kept out of out), if any. Every
// backslash in JSON text starts an escape, so escapes are read whole, from
// one backslash to the next: \\ is one escape, never the start of another.
// out is b itself when there is nothing to change.
func unescapeHTML(b []byte) (out, rest []byte) {
	i := bytes.IndexByte(b, '\\')
	if i < 0 {
		return b, nil
	}
	out = make([]byte, 0, len(b))
	for i >= 0 {
		j := i
		out = append(out, b[:j]...)
		b = b[j:]
		switch {
		case len(b) < 2:
			return out, b
		case b[1] != 'u':
			out = append(out, b[:2]...)
			b = b[2:]
		case len(b) < 6:
			return out, b
		default:
			switch string(b[2:6]) {
			case "003c":
				out = append(out, '<')
			case "003e":
				out = append(out, '>')
			case "0026":
				out = append(out, '&')
			default:
				out = append(out, b[:6]...)
			}
			b = b[6:]
		}
		i = bytes.IndexByte(b, '\\')
	}
	return append(out, b...), nil
}

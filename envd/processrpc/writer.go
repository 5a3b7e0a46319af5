//go:build linux

package processrpc

import (
	"context"
	"net/http"
	"sync"
)

// batchSize is the most bytes of streamed messages held back to be written
// together.
const batchSize = 128 << 10

var batchPool = sync.Pool{New: func() any { b := make([]byte, 0, batchSize); return &b }}

// batchWriter sits between connect-go and the http.ResponseWriter of a
// server stream (Start, Connect) and turns many small writes into few large
// ones:
//
//   - connect-go writes each message as a 5-byte envelope prefix and then the
//     payload, and flushes; the HTTP/2 server cuts such writes at its 4 KiB
//     handler buffer, so a 32 KiB chunk of output became two DATA frames and
//     two hand-offs to the connection's goroutine. Buffered here, a message
//     reaches the connection as one write.
//   - While the stream loop knows that more output is already waiting
//     (holdFlush), flushes are skipped until batchSize bytes are buffered, so
//     a fast producer costs one write per ~128 KiB instead of one per chunk.
//     Nothing waits on a timer: the next message is ready at once, and the
//     last one of a burst is always flushed.
//
// It is used only from the handler's goroutine.
type batchWriter struct {
	http.ResponseWriter
	flusher http.Flusher
	buf     *[]byte
	hold    bool
	err     error // sticky write error
}

type batchWriterKey struct{}

// withBatchWriter wraps w for the duration of a stream handler. The caller
// must call finish after the handler returns.
func withBatchWriter(w http.ResponseWriter, r *http.Request) (*batchWriter, *http.Request) {
	f, ok := w.(http.Flusher)
	if !ok {
		return nil, r
	}
	bw := &batchWriter{ResponseWriter: w, flusher: f, buf: batchPool.Get().(*[]byte)}
	return bw, r.WithContext(context.WithValue(r.Context(), batchWriterKey{}, bw))
}

// batchWriterFrom returns the batchWriter of a stream handler's context, or
// nil.
func batchWriterFrom(ctx context.Context) *batchWriter {
	bw, _ := ctx.Value(batchWriterKey{}).(*batchWriter)
	return bw
}

func (w *batchWriter) Write(b []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	buf := *w.buf
	if len(buf)+len(b) > cap(buf) {
		if err := w.writeOut(); err != nil {
			return 0, err
		}
		if len(b) > cap(buf) {
			n, err := w.ResponseWriter.Write(b)
			w.err = err
			return n, err
		}
		buf = *w.buf
	}
	*w.buf = append(buf, b...)
	return len(b), nil
}

// writeOut passes the buffered bytes on in one write.
func (w *batchWriter) writeOut() error {
	if w.err != nil || len(*w.buf) == 0 {
		return w.err
	}
	_, w.err = w.ResponseWriter.Write(*w.buf)
	*w.buf = (*w.buf)[:0]
	return w.err
}

// Flush sends the buffered bytes to the client, unless holdFlush asked to
// wait for more and there is room for it.
func (w *batchWriter) Flush() {
	if w.hold && len(*w.buf) <= batchSize/2 {
		return
	}
	if w.writeOut() == nil {
		w.flusher.Flush()
	}
}

// holdFlush tells the writer whether another message will follow at once.
// On a nil writer it does nothing.
func (w *batchWriter) holdFlush(hold bool) {
	if w != nil {
		w.hold = hold
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *batchWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish flushes what is left and recycles the buffer.
func (w *batchWriter) finish() {
	w.hold = false
	w.Flush()
	*w.buf = (*w.buf)[:0]
	batchPool.Put(w.buf)
	w.buf = nil
}

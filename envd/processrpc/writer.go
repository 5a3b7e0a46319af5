//go:build linux

package processrpc

import (
	"context"
	"net/http"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/envd/process"
)

// batchSize is the capacity of a stream's write buffer (512 KiB): room for
// the largest data event (process.MaxChunkSize of output, in binary or as
// base64 in JSON) with its envelope, and for a burst of smaller ones.
const batchSize = 2 * process.MaxChunkSize

var batchPool = sync.Pool{New: func() any { b := make([]byte, 0, batchSize); return &b }}

// batchWriter sits between connect-go and the http.ResponseWriter of a
// server stream (Start, Connect) and turns many small writes into few large
// ones:
//
//   - connect-go writes each message as a 5-byte envelope prefix and then the
//     payload, and flushes; the HTTP/2 server cuts such writes at its 4 KiB
//     handler buffer, and every write it passes on is a round trip to the
//     connection's goroutine, so a chunk of output became two or more DATA
//     frames and as many hand-offs. Buffered here, a message reaches the
//     connection as one write.
//   - While the stream loop knows that more output is already waiting
//     (holdFlush), flushes are skipped until half of batchSize is buffered,
//     so a fast producer of small chunks costs one write per ~256 KiB
//     instead of one per chunk. Nothing waits on a timer: the next message
//     is ready at once, and the last one of a burst is always flushed.
//
// The buffer is taken from a pool for a burst and given back at the flush
// that ends it, so an idle stream holds none.
//
// It is used only from the handler's goroutine.
type batchWriter struct {
	http.ResponseWriter
	flusher http.Flusher
	buf     *[]byte // nil between bursts
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
	bw := &batchWriter{ResponseWriter: w, flusher: f}
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
	if w.buf == nil {
		w.buf = batchPool.Get().(*[]byte)
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
	if w.err != nil || w.buf == nil || len(*w.buf) == 0 {
		return w.err
	}
	_, w.err = w.ResponseWriter.Write(*w.buf)
	*w.buf = (*w.buf)[:0]
	return w.err
}

// Flush sends the buffered bytes to the client, unless holdFlush asked to
// wait for more and there is room for it. A flush that sends gives the
// buffer back to the pool.
func (w *batchWriter) Flush() {
	if w.hold && w.buf != nil && len(*w.buf) <= batchSize/2 {
		return
	}
	if w.writeOut() == nil {
		w.flusher.Flush()
	}
	w.release()
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

// finish flushes what is left and gives the buffer back.
func (w *batchWriter) finish() {
	w.hold = false
	w.Flush()
}

func (w *batchWriter) release() {
	if w.buf != nil {
		*w.buf = (*w.buf)[:0]
		batchPool.Put(w.buf)
		w.buf = nil
	}
}

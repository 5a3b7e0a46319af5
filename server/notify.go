package server

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// flushTimeout bounds the wait for a stateless request's notifications to
// be written after its tool handler returned.
const flushTimeout = 2 * time.Second

// mcp-go v1.2.1 can drop the last notification a handler sends just before
// it returns: the goroutine that forwards notifications to the SSE response
// takes it off the session's channel, then finds the request done and
// discards it. The event store closes that gap for requests of revisions
// with sessions, but mcp-go disables it for stateless (2026-07-28) requests,
// where the loss remains (about one call in six sent its last progress
// notification into the void in our probe). Over stdio nothing is lost, but
// notifications are written by their own goroutine, so the last one can
// reach the client after the response, when its progress token is no
// longer active.
//
// The fix for both: the tool middleware counts the notifications a call
// queues (through a session wrapper) and, after the handler returns but
// before mcp-go writes the response, waits until the transport has written
// as many. While the handler has not returned, the HTTP forwarder never
// finds the request done, so every notification it took is written; over
// stdio the notification channel is FIFO with one writer, so once the count
// of written notifications reaches the count of queued ones, this call's
// are out (stdioConn.forwardNotifications counts them as it writes them).

// notifyCounter counts the notifications queued for and written to one
// output: an HTTP response (per request) or stdout (the stdio session).
type notifyCounter struct {
	queued atomic.Int64

	mu      sync.Mutex
	written int64
	changed chan struct{} // closed and replaced on every write counted
}

func newNotifyCounter() *notifyCounter {
	return &notifyCounter{changed: make(chan struct{})}
}

func (c *notifyCounter) wrote() {
	c.mu.Lock()
	c.written++
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// waitWritten waits until n notifications were written, ctx ends or the
// timeout passes; it reports whether n were written. After a timeout the
// count of written notifications is raised to n: a notification mcp-go
// dropped (its channel was full) is counted as queued but never written, and
// must not make every later call wait too.
func (c *notifyCounter) waitWritten(ctx context.Context, n int64, timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		got, changed := c.written, c.changed
		c.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		case <-timer.C:
			c.mu.Lock()
			c.written = max(c.written, n)
			c.mu.Unlock()
			return false
		}
	}
}

type notifyCounterKey struct{}

// sseCounter counts the SSE events written to one HTTP response.
type sseCounter struct {
	http.ResponseWriter
	counter *notifyCounter
}

var ssePrefix = []byte("event: ")

func (w sseCounter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	// mcp-go writes each event with one Write call.
	if bytes.HasPrefix(p, ssePrefix) {
		w.counter.wrote()
	}
	return n, err
}

func (w sseCounter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w sseCounter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countingSession counts the notifications sent through a session. It
// passes on the optional behaviours a tool handler's notifications depend
// on (the SSE upgrade and the log level).
type countingSession struct {
	server.ClientSession
	queued *atomic.Int64
}

func (s countingSession) NotificationChannel() chan<- mcp.JSONRPCNotification {
	s.queued.Add(1)
	return s.ClientSession.NotificationChannel()
}

func (s countingSession) UpgradeToSSEWhenReceiveNotification() {
	if u, ok := s.ClientSession.(server.SessionWithStreamableHTTPConfig); ok {
		u.UpgradeToSSEWhenReceiveNotification()
	}
}

func (s countingSession) SetLogLevel(level mcp.LoggingLevel) {
	if l, ok := s.ClientSession.(server.SessionWithLogging); ok {
		l.SetLogLevel(level)
	}
}

func (s countingSession) GetLogLevel() mcp.LoggingLevel {
	if l, ok := s.ClientSession.(server.SessionWithLogging); ok {
		return l.GetLogLevel()
	}
	return mcp.LoggingLevelError
}

// flushNotifications runs next so that every notification it sends is
// written before the response (see notifyCounter).
func (s *Server) flushNotifications(ctx context.Context, counter *notifyCounter, req mcp.CallToolRequest, next server.ToolHandlerFunc) (*mcp.CallToolResult, error) {
	session := server.ClientSessionFromContext(ctx)
	if session == nil {
		return next(ctx, req)
	}
	before := counter.queued.Load()
	ctx = s.mcp.WithContext(ctx, countingSession{ClientSession: session, queued: &counter.queued})
	res, err := next(ctx, req)
	if n := counter.queued.Load(); n > before && !counter.waitWritten(ctx, n, flushTimeout) && ctx.Err() == nil {
		s.log.Debug("notifications were not all written in time", "tool", req.Params.Name, "queued", n-before)
	}
	return res, err
}

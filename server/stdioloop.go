package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// The stdio transport is ours rather than mcp-go's StdioServer, whose read
// loop parses a message several times before mcp-go's HandleMessage parses
// it again, and whose writer marshals a result and then compacts it twice.
// Here each line is read once, a tools/call of one of our tools has its
// arguments split off in one pass (tools.SplitToolCall) so that mcp-go
// parses only the small rest, and a tool result is written once, its text
// escaped in one pass (tools.AppendJSONString). Everything else goes
// through HandleMessage as with mcp-go's transport: tool calls on a pool of
// workers, other requests each on its own goroutine, notifications in
// order on the read loop.

const (
	// stdioWorkers is how many tool calls a stdio session runs at once
	// (mcp-go's default is 5, too few for an agent that starts background
	// work and then reads its output).
	stdioWorkers = 16
	// stdioQueue is how many tool calls wait for a worker before the read
	// loop serves one itself (and reads nothing meanwhile).
	stdioQueue = 100
	// stdioNotificationQueue is how many notifications wait to be written;
	// beyond it mcp-go drops them (and says so to the error hooks).
	stdioNotificationQueue = 100
	// stdioReadBuffer is the read buffer of stdin.
	stdioReadBuffer = 1 << 20
)

// stdioSession is the one client session of a stdio connection.
type stdioSession struct {
	notifications chan mcp.JSONRPCNotification
	initialized   atomic.Bool
	logLevel      atomic.Value // mcp.LoggingLevel
	clientInfo    atomic.Value // mcp.Implementation
	clientCaps    atomic.Value // mcp.ClientCapabilities
	protocol      atomic.Value // string
}

func newStdioSession() *stdioSession {
	return &stdioSession{notifications: make(chan mcp.JSONRPCNotification, stdioNotificationQueue)}
}

// SessionID is "stdio", as with mcp-go's stdio transport.
func (s *stdioSession) SessionID() string { return "stdio" }

func (s *stdioSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return s.notifications }

// Initialize marks the session initialized, with the log level error until
// the client sets one.
func (s *stdioSession) Initialize() {
	if s.logLevel.Load() == nil {
		s.logLevel.Store(mcp.LoggingLevelError)
	}
	s.initialized.Store(true)
}

func (s *stdioSession) Initialized() bool { return s.initialized.Load() }

func (s *stdioSession) SetLogLevel(level mcp.LoggingLevel) { s.logLevel.Store(level) }

func (s *stdioSession) GetLogLevel() mcp.LoggingLevel {
	if l, ok := s.logLevel.Load().(mcp.LoggingLevel); ok {
		return l
	}
	return mcp.LoggingLevelError
}

func (s *stdioSession) GetClientInfo() mcp.Implementation {
	info, _ := s.clientInfo.Load().(mcp.Implementation)
	return info
}

func (s *stdioSession) SetClientInfo(info mcp.Implementation) { s.clientInfo.Store(info) }

func (s *stdioSession) GetClientCapabilities() mcp.ClientCapabilities {
	caps, _ := s.clientCaps.Load().(mcp.ClientCapabilities)
	return caps
}

func (s *stdioSession) SetClientCapabilities(caps mcp.ClientCapabilities) { s.clientCaps.Store(caps) }

// ProtocolVersion is the version initialize negotiated ("" before).
func (s *stdioSession) ProtocolVersion() string {
	v, _ := s.protocol.Load().(string)
	return v
}

// SetProtocolVersion records the negotiated version (mcp-go calls it).
func (s *stdioSession) SetProtocolVersion(v string) { s.protocol.Store(v) }

// stdioConn serves one stdio session.
type stdioConn struct {
	s       *Server
	session *stdioSession
	out     io.Writer
	// limit is the most bytes a tool result's message may take (0: none).
	limit int64
	// notified counts the notifications written (see notifyCounter).
	notified *notifyCounter
	writeMu  sync.Mutex // one message per Write, whole
}

// stdioWork is one message to serve.
type stdioWork struct {
	ctx context.Context
	id  any // the JSON-RPC id, for an error response after a panic
	msg []byte
}

// serveStdioConn serves in and out until in ends (nil) or ctx does (its
// error); calls still running then are cancelled and waited for. Each
// notification written to out is counted in notified.
func (s *Server) serveStdioConn(ctx context.Context, in io.Reader, out io.Writer, notified *notifyCounter) error {
	session := newStdioSession()
	if err := s.mcp.RegisterSession(ctx, session); err != nil {
		return fmt.Errorf("register the stdio session: %w", err)
	}
	defer s.mcp.UnregisterSession(ctx, session.SessionID())
	ctx = s.mcp.WithContext(ctx, session)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &stdioConn{s: s, session: session, out: out, limit: s.cfg.MaxStdioMessageBytes, notified: notified}
	if c.limit > 0 {
		ctx = tools.WithMessageLimit(ctx, c.limit)
	}

	queue := make(chan stdioWork, stdioQueue)
	var workers, requests, notifier sync.WaitGroup
	for range stdioWorkers {
		workers.Go(func() {
			for {
				select {
				case w, ok := <-queue:
					if !ok {
						return
					}
					c.serve(w)
				case <-ctx.Done():
					return
				}
			}
		})
	}
	notifier.Go(func() { c.forwardNotifications(ctx) })

	err := c.readLoop(ctx, in, queue, &requests)
	cancel()
	close(queue)
	workers.Wait()
	requests.Wait()
	notifier.Wait()
	return err
}

// readLoop reads lines from in and dispatches them until in ends or ctx
// does. A last line without a newline is dropped, as mcp-go does.
func (c *stdioConn) readLoop(ctx context.Context, in io.Reader, queue chan<- stdioWork, requests *sync.WaitGroup) error {
	type read struct {
		line []byte
		err  error
	}
	lines := make(chan read)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		r := bufio.NewReaderSize(in, stdioReadBuffer)
		for {
			line, err := r.ReadBytes('\n')
			select {
			case lines <- read{line, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var got read
		select {
		case got = <-lines:
		case <-ctx.Done():
			return ctx.Err()
		}
		if got.err != nil {
			if errors.Is(got.err, io.EOF) {
				return nil
			}
			c.s.log.Error("reading stdin", "err", got.err)
			return got.err
		}
		if err := c.dispatch(ctx, got.line, queue, requests); err != nil {
			return err
		}
	}
}

// dispatch serves one line: a tool call on the worker pool (split first
// when it calls one of our tools), another request on its own goroutine, a
// notification or anything else right away.
func (c *stdioConn) dispatch(ctx context.Context, line []byte, queue chan<- stdioWork, requests *sync.WaitGroup) error {
	msg, callCtx := line, ctx
	if small, args, ok := tools.SplitToolCall(line, c.s.splitsArguments); ok {
		msg, callCtx = small, tools.WithArguments(ctx, args)
	}
	var base struct {
		Method string `json:"method"`
		ID     any    `json:"id,omitempty"`
	}
	// Unmarshal checks the whole message is JSON before it decodes.
	err := json.Unmarshal(msg, &base)
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		c.write(ctx, mcp.NewJSONRPCError(mcp.NewRequestId(nil), mcp.PARSE_ERROR, "Parse error", nil))
		return nil
	}
	parsed := err == nil
	w := stdioWork{ctx: callCtx, id: base.ID, msg: msg}
	switch {
	case parsed && base.Method == string(mcp.MethodToolsCall):
		select {
		case queue <- w:
		case <-ctx.Done():
			return ctx.Err()
		default:
			c.s.log.Warn("the stdio tool call queue is full; serving a call on the read loop")
			c.serve(w)
		}
	case parsed && base.ID != nil:
		requests.Go(func() { c.serve(w) })
	default:
		c.serve(w)
	}
	return nil
}

// serve handles one message and writes its response, if any. A panic
// becomes an internal error response (for a request) or nothing (for a
// notification).
func (c *stdioConn) serve(w stdioWork) {
	resp := func() (resp mcp.JSONRPCMessage) {
		defer func() {
			if r := recover(); r != nil {
				c.s.log.Error("panic serving a stdio message", "panic", r)
				resp = nil
				if w.id != nil {
					resp = mcp.NewJSONRPCError(mcp.NewRequestId(w.id), mcp.INTERNAL_ERROR, fmt.Sprintf("internal panic: %v", r), nil)
				}
			}
		}()
		return c.s.mcp.HandleMessage(w.ctx, w.msg)
	}()
	if resp != nil {
		c.write(w.ctx, resp)
	}
}

// forwardNotifications writes the session's notifications, counting each,
// until ctx ends.
func (c *stdioConn) forwardNotifications(ctx context.Context) {
	for {
		select {
		case n := <-c.session.notifications:
			c.write(ctx, n)
			c.notified.wrote()
		case <-ctx.Done():
			return
		}
	}
}

// write encodes msg as one line and writes it with one Write. A tool result
// whose line would exceed the message limit is replaced by an isError
// result that says so.
func (c *stdioConn) write(ctx context.Context, msg any) {
	line, isResult, err := appendMessage(make([]byte, 0, sizeHint(msg)), msg)
	if err != nil {
		c.s.log.Error("a stdio message does not encode", "err", err)
		return
	}
	if isResult && c.limit > 0 && int64(len(line)) > c.limit {
		resp := msg.(mcp.JSONRPCResponse)
		c.s.log.Warn("a tool result is larger than a stdio message may be; sending an error instead", "bytes", len(line), "limit", c.limit)
		resp.Result = mcp.NewToolResultError(fmt.Sprintf(
			"The result was %d bytes, more than the %d bytes this client takes in one message. Ask for less at once (for example read_files with limit, or fewer paths).",
			len(line), c.limit))
		if line, _, err = appendMessage(nil, resp); err != nil {
			c.s.log.Error("a stdio message does not encode", "err", err)
			return
		}
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if _, err := c.out.Write(line); err != nil && ctx.Err() == nil {
		c.s.log.Debug("writing to stdout", "err", err)
	}
}

// sizeHint is a guess of msg's encoded size that is rarely short: a tool
// result's strings and a ninth more for their escapes.
func sizeHint(msg any) int {
	n := 512
	r, ok := msg.(mcp.JSONRPCResponse)
	if !ok {
		return n
	}
	res, ok := r.Result.(*mcp.CallToolResult)
	if !ok || res == nil {
		return n
	}
	for _, item := range res.Content {
		switch c := item.(type) {
		case mcp.TextContent:
			n += len(c.Text) + len(c.Text)/8 + 64
		case mcp.ImageContent:
			n += len(c.Data) + 128
		}
	}
	if raw, ok := res.StructuredContent.(json.RawMessage); ok {
		n += len(raw)
	}
	return n
}

// appendMessage appends msg and a newline to dst. A tool result (isResult)
// is written directly, each string escaped once; anything else is
// json.Marshal'ed.
func appendMessage(dst []byte, msg any) (line []byte, isResult bool, err error) {
	if r, ok := msg.(mcp.JSONRPCResponse); ok {
		if res, ok := r.Result.(*mcp.CallToolResult); ok && res != nil {
			if out, ok, err := appendToolResponse(dst, r.ID, res); ok || err != nil {
				return out, true, err
			}
			isResult = true
		}
	}
	dst, err = appendMarshal(dst, msg)
	if err != nil {
		return nil, isResult, err
	}
	return append(dst, '\n'), isResult, nil
}

// appendToolResponse appends the response carrying res, as
// CallToolResult.MarshalJSON would render it, or reports false when res has
// parts it does not write itself (a multi round-trip request for input).
func appendToolResponse(dst []byte, id mcp.RequestId, res *mcp.CallToolResult) ([]byte, bool, error) {
	if len(res.InputRequests) > 0 || res.RequestState != "" {
		return nil, false, nil
	}
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst, err := appendMarshal(dst, id)
	if err != nil {
		return nil, false, err
	}
	dst = append(dst, `,"result":{`...)
	if res.Meta != nil {
		dst = append(dst, `"_meta":`...)
		if dst, err = appendMarshal(dst, res.Meta); err != nil {
			return nil, false, err
		}
		dst = append(dst, ',')
	}
	if res.ResultType != "" {
		dst = append(dst, `"resultType":`...)
		dst = tools.AppendJSONString(dst, string(res.ResultType))
		dst = append(dst, ',')
	}
	dst = append(dst, `"content":[`...)
	for i, item := range res.Content {
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, err = appendContent(dst, item); err != nil {
			return nil, false, err
		}
	}
	dst = append(dst, ']')
	switch {
	case len(res.RawStructuredContent) > 0:
		dst = append(dst, `,"structuredContent":`...)
		if dst, err = appendRaw(dst, res.RawStructuredContent); err != nil {
			return nil, false, err
		}
	case res.StructuredContent != nil:
		dst = append(dst, `,"structuredContent":`...)
		if raw, ok := res.StructuredContent.(json.RawMessage); ok {
			dst, err = appendRaw(dst, raw)
		} else {
			dst, err = appendMarshal(dst, res.StructuredContent)
		}
		if err != nil {
			return nil, false, err
		}
	}
	if res.IsError {
		dst = append(dst, `,"isError":true`...)
	}
	return append(dst, "}}\n"...), true, nil
}

// appendContent appends one content block: text and images directly (they
// carry the large strings), anything else json.Marshal'ed.
func appendContent(dst []byte, item mcp.Content) ([]byte, error) {
	var err error
	switch c := item.(type) {
	case mcp.TextContent:
		dst = append(dst, '{')
		if dst, err = appendCommon(dst, c.Annotations, c.Meta); err != nil {
			return nil, err
		}
		dst = append(dst, `"type":`...)
		dst = tools.AppendJSONString(dst, c.Type)
		dst = append(dst, `,"text":`...)
		dst = tools.AppendJSONString(dst, c.Text)
		return append(dst, '}'), nil
	case mcp.ImageContent:
		dst = append(dst, '{')
		if dst, err = appendCommon(dst, c.Annotations, c.Meta); err != nil {
			return nil, err
		}
		dst = append(dst, `"type":`...)
		dst = tools.AppendJSONString(dst, c.Type)
		dst = append(dst, `,"data":`...)
		dst = tools.AppendJSONString(dst, c.Data)
		dst = append(dst, `,"mimeType":`...)
		dst = tools.AppendJSONString(dst, c.MIMEType)
		return append(dst, '}'), nil
	}
	return appendMarshal(dst, item)
}

// appendCommon appends a content block's annotations and _meta members,
// each followed by a comma, when set.
func appendCommon(dst []byte, annotations *mcp.Annotations, meta *mcp.Meta) ([]byte, error) {
	var err error
	if annotations != nil {
		dst = append(dst, `"annotations":`...)
		if dst, err = appendMarshal(dst, annotations); err != nil {
			return nil, err
		}
		dst = append(dst, ',')
	}
	if meta != nil {
		dst = append(dst, `"_meta":`...)
		if dst, err = appendMarshal(dst, meta); err != nil {
			return nil, err
		}
		dst = append(dst, ',')
	}
	return dst, nil
}

// appendMarshal appends v as json.Marshal renders it, without HTML
// escaping: <, > and & stay as they are, as in the strings written
// directly.
func appendMarshal(dst []byte, v any) ([]byte, error) {
	b := bytes.NewBuffer(dst)
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}

// appendRaw appends raw JSON: as it is when it is valid and on one line (as
// the tools' own json.Marshal output is), compacted otherwise.
func appendRaw(dst []byte, raw json.RawMessage) ([]byte, error) {
	if !json.Valid(raw) {
		return nil, errors.New("structuredContent is not valid JSON")
	}
	if bytes.IndexByte(raw, '\n') < 0 && bytes.IndexByte(raw, '\r') < 0 {
		return append(dst, raw...), nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return append(dst, b.Bytes()...), nil
}

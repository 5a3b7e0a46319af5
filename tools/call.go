package tools

import (
	"context"
	"fmt"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Call is the state of one tool call: the workspace lease once acquired and
// the notices gathered for the result.
type Call struct {
	// ctx is the call's context (the request's): lifecycle waits end with it.
	ctx     context.Context
	d       *Deps
	req     mcp.CallToolRequest
	ws      Workspace
	tool    string
	lease   *manage.Lease
	notices []string
	// messageLimit is the most bytes the call's whole response may take on
	// the wire (0: no limit; see WithMessageLimit).
	messageLimit int64
	// readLimit lowers read_files' read cap to fit messageLimit (0: not).
	readLimit int64
	// progressMu guards lastProgress, the progress last sent (MCP wants
	// each notification's progress above the one before).
	progressMu   sync.Mutex
	lastProgress float64
	sentProgress bool
}

// Notice adds a sentence the agent must see.
func (c *Call) Notice(format string, args ...any) {
	c.notices = append(c.notices, fmt.Sprintf(format, args...))
}

// Sandbox acquires the workspace's sandbox (once per call), turning the
// lifecycle events that happened since the last call into notices.
func (c *Call) Sandbox(ctx context.Context) (*manage.Lease, error) {
	if c.lease != nil {
		return c.lease, nil
	}
	l, err := c.d.Manager.Acquire(ctx, c.ws.Key, c.ws.Named)
	if err != nil {
		return nil, err
	}
	c.lease = l
	for _, ev := range l.Events {
		if n := eventNotice(ev); n != "" {
			c.notices = append(c.notices, n)
		}
	}
	c.recoverJournals(ctx, l)
	return l, nil
}

// Check turns an envd error from an operation under the lease into a
// *manage.LostError when the sandbox turned out to be lost.
func (c *Call) Check(err error) error {
	if err == nil || c.lease == nil {
		return err
	}
	return c.lease.Check(c.ctx, err)
}

func (c *Call) release() {
	if c.lease != nil {
		c.lease.Release()
	}
}

// progressToken returns the call's progress token, or nil.
func (c *Call) progressToken() mcp.ProgressToken {
	if c.req.Params.Meta == nil {
		return nil
	}
	return c.req.Params.Meta.ProgressToken
}

// sendProgress sends notifications/progress when the client asked for it.
// A progress not above the last one sent in this call is dropped: MCP
// requires progress to increase, whichever path of a call (a retried run,
// several batches) reports it.
func (c *Call) sendProgress(ctx context.Context, progress float64, message string) {
	tok := c.progressToken()
	if tok == nil {
		return
	}
	c.progressMu.Lock()
	if c.sentProgress && progress <= c.lastProgress {
		c.progressMu.Unlock()
		return
	}
	c.lastProgress, c.sentProgress = progress, true
	c.progressMu.Unlock()
	s := server.ServerFromContext(ctx)
	if s == nil {
		return
	}
	params := map[string]any{"progressToken": tok, "progress": progress}
	if message != "" {
		params["message"] = message
	}
	if err := s.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), params); err != nil {
		c.d.Logger.Debug("progress notification not sent", "tool", c.tool, "err", err)
	}
}

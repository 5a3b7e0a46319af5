package server

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/mark3labs/mcp-go/server"
)

// stdioWorkers is how many tool calls a stdio session runs at once (mcp-go's
// default is 5, too few for an agent that starts background work and then
// reads its output).
const stdioWorkers = 16

// ServeStdio serves one MCP session over in and out (newline-delimited
// JSON-RPC) until in reaches EOF or ctx ends, then applies the
// end-of-session policy to the stdio workspace (Config.Workspace: a named
// one is paused, an anonymous one killed). Only protocol messages are
// written to out; logs go to the Server's logger. Calls still running when
// it returns are cancelled. It returns nil after EOF or ctx's end.
//
// mcp-go keeps the stdio session in a package variable: run at most one
// ServeStdio per process at a time. Shutting the Manager down stays with the
// caller.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	ss := server.NewStdioServer(s.mcp)
	ss.SetErrorLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelError))
	server.WithWorkerPoolSize(stdioWorkers)(ss)
	s.log.Info("serving MCP over stdio", "workspace", s.stdioWS.Key, "named", s.stdioWS.Named)
	// The calls' contexts derive from Listen's: the counter there makes
	// bindWorkspace flush each call's notifications before its result.
	counter := newNotifyCounter()
	err := ss.Listen(context.WithValue(ctx, notifyCounterKey{}, counter), in, stdioCounter{w: out, counter: counter})
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		err = nil
	}
	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endSessionTimeout)
	defer cancel()
	if perr := s.manager.EndSession(endCtx, s.stdioWS.Key); perr != nil {
		s.log.Warn("could not apply the end-of-session policy to the stdio workspace", "workspace", s.stdioWS.Key, "err", perr)
	}
	s.cfg.Deps.EndSession(s.stdioWS.Key)
	return err
}

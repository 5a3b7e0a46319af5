package server

import (
	"context"
	"errors"
	"io"
)

// ServeStdio serves one MCP session over in and out (newline-delimited
// JSON-RPC) until in reaches EOF or ctx ends, then applies the
// end-of-session policy to the stdio workspace (Config.Workspace: a named
// one is paused, an anonymous one killed). Only protocol messages are
// written to out; logs go to the Server's logger. Calls still running when
// it returns are cancelled. It returns nil after EOF or ctx's end.
//
// Each tool result is kept within Config.MaxStdioMessageBytes (read_files
// returns less; any other result that would not fit is replaced by an
// isError result saying so). Run at most one ServeStdio per Server at a
// time (the session registers as "stdio"). Shutting the Manager down stays
// with the caller.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	s.log.Info("serving MCP over stdio", "workspace", s.stdioWS.Key, "named", s.stdioWS.Named)
	// The calls' contexts derive from this one: the counter there makes
	// bindWorkspace flush each call's notifications before its result.
	counter := newNotifyCounter()
	err := s.serveStdioConn(context.WithValue(ctx, notifyCounterKey{}, counter), in, out, counter)
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

package tools

import (
	"context"
	"errors"
	"sync"
)

// InputErrorReport tells an in-process caller whether its tool calls failed
// on their arguments, from the typed error rather than the result's text:
// every tool reports a bad argument as an *InputError, whether the input
// schema rejected it or the tool's own checks did, and the isError result
// carries only its words. `sandbox-mcp call` uses it to exit 2 and print the
// input schema for a call the user should fix.
type InputErrorReport struct {
	mu  sync.Mutex
	err *InputError
}

type inputErrorReportKey struct{}

// WithInputErrorReport returns a context carrying a new report; tool calls
// handled with it (or a context derived from it) record their argument
// errors there. An in-process mcp-go client passes the context of CallTool
// through to the tool.
func WithInputErrorReport(ctx context.Context) (context.Context, *InputErrorReport) {
	r := &InputErrorReport{}
	return context.WithValue(ctx, inputErrorReportKey{}, r), r
}

// Err returns the bad argument that made a call end in an isError result, or
// nil when no call failed on its arguments (of several, the latest).
func (r *InputErrorReport) Err() *InputError {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// reportInputError records err in the context's report when err is an
// *InputError and the context carries a report.
func reportInputError(ctx context.Context, err error) {
	r, ok := ctx.Value(inputErrorReportKey{}).(*InputErrorReport)
	var ie *InputError
	if !ok || !errors.As(err, &ie) {
		return
	}
	r.mu.Lock()
	r.err = ie
	r.mu.Unlock()
}

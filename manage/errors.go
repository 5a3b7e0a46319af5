package manage

import (
	"errors"
	"fmt"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// LostError reports that the sandbox behind an operation was lost (gone, or
// its daemon stopped) and, unless AutoRecreate is off or replacing failed,
// that a replacement now serves the workspace. The operation is never
// replayed: NotRun says whether it certainly did not run.
type LostError struct {
	// Key is the workspace key.
	Key string
	// PrevGeneration is the generation that was lost.
	PrevGeneration int64
	// Generation is the replacement's generation (0 when not replaced).
	Generation int64
	// State and Detail are what the provider said of the lost sandbox.
	State  State
	Detail string
	// NotRun is true when the operation certainly never reached the
	// sandbox; false means it may have partly run.
	NotRun bool
	// Replaced is true when a replacement was published.
	Replaced bool
	// FilesKept is true when the replacement kept the workspace files (a
	// stopped sandbox restarted with a new daemon).
	FilesKept bool
	// OnlyWorkspaceKept is true when only the files of the workspace
	// directory were kept (a new sandbox on the workspace's volume): the
	// rest of its filesystem is new.
	OnlyWorkspaceKept bool
	// ReplaceErr says why no replacement was made while AutoRecreate is on.
	ReplaceErr error
	// Cause is the error that revealed the loss (nil when the loss was
	// found before anything was sent).
	Cause error

	// endedAt is when the provider saw the sandbox end (zero if unknown):
	// an operation started after it certainly did not run.
	endedAt time.Time
}

// forOperation returns a copy of e for an operation that acquired its lease
// at acquired and failed with cause: NotRun is decided per operation, the
// same way for every caller that reports this loss.
func (e *LostError) forOperation(cause error, acquired time.Time) *LostError {
	le := *e
	le.Cause = cause
	le.NotRun = neverRan(cause, e.endedAt, acquired)
	return &le
}

// neverRan reports whether an operation that acquired its lease at acquired
// and failed with cause certainly never ran in a sandbox that ended at
// endedAt (zero when unknown): nothing was sent, or the sandbox had ended
// before the operation began.
func neverRan(cause error, endedAt, acquired time.Time) bool {
	return envdclient.IsNotSent(cause) || (!endedAt.IsZero() && endedAt.Before(acquired))
}

// Error says what was lost, whether it was replaced, and whether the
// operation ran.
func (e *LostError) Error() string {
	what := fmt.Sprintf("sandbox for workspace %q (generation %d) was lost (%s", e.Key, e.PrevGeneration, e.State)
	if e.Detail != "" {
		what += ": " + e.Detail
	}
	what += ")"
	switch {
	case e.Replaced:
		what += fmt.Sprintf("; replaced by generation %d", e.Generation)
	case e.ReplaceErr != nil:
		what += fmt.Sprintf("; replacing it failed: %v", e.ReplaceErr)
	default:
		what += "; automatic recreation is off"
	}
	if e.NotRun {
		return what + "; the operation was not run"
	}
	return what + "; the operation may have partly run"
}

// Unwrap returns the error that revealed the loss.
func (e *LostError) Unwrap() error { return e.Cause }

// IsLost reports whether err is (or wraps) a *LostError. AsLost returns it.
func IsLost(err error) bool {
	_, ok := AsLost(err)
	return ok
}

// AsLost returns the *LostError err is or wraps, and whether there is one.
func AsLost(err error) (*LostError, bool) {
	var le *LostError
	ok := errors.As(err, &le)
	return le, ok
}

// StaleError reports a handle (a process id, a run id) from a sandbox that
// has since been replaced.
type StaleError struct {
	// Handle names the handle as the agent gave it.
	Handle string
	// HandleGeneration is the generation the handle belongs to.
	HandleGeneration int64
	// Generation is the workspace's current generation.
	Generation int64
}

// Error names the handle, its generation and the current one.
func (e *StaleError) Error() string {
	return fmt.Sprintf("%s belongs to a previous sandbox (generation %d); the workspace is now on generation %d, and processes and runs from before are gone",
		e.Handle, e.HandleGeneration, e.Generation)
}

// IsStale reports whether err is (or wraps) a *StaleError.
func IsStale(err error) bool {
	var se *StaleError
	return errors.As(err, &se)
}

// ErrClosed is returned for workspaces of a Manager that was shut down.
var ErrClosed = errors.New("sandbox manager is shut down")

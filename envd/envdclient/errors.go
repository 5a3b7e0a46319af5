package envdclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"

	"connectrpc.com/connect"
)

// DialError reports that no connection to envd could be opened. Nothing of
// the request was sent.
type DialError struct {
	Addr string
	Err  error
}

func (e *DialError) Error() string { return fmt.Sprintf("dial envd at %s: %v", e.Addr, e.Err) }

// Unwrap returns the dialer's error.
func (e *DialError) Unwrap() error { return e.Err }

// StreamCutError reports that a stream ended without its final event: the
// daemon, the connection or a proxy went away mid-call. Whatever the call
// started may have partly run.
type StreamCutError struct {
	What string // "process stream", "stdin stream", …
	Err  error  // the underlying read error, if any
}

func (e *StreamCutError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s ended before its end event: %v", e.What, e.Err)
	}
	return e.What + " ended before its end event"
}

// Unwrap returns the underlying read error.
func (e *StreamCutError) Unwrap() error { return e.Err }

// ProxySandboxNotFound is the message of E2B's envd proxy when it has no
// sandbox to route a request to (HTTP 502 with the JSON body
// {"sandboxId", "message", "code"}).
const ProxySandboxNotFound = "The sandbox was not found"

// SandboxNotFoundError reports that E2B's envd proxy answered that it has no
// sandbox SandboxID to route the request to: it reached no envd, so nothing
// of it ran.
type SandboxNotFoundError struct {
	SandboxID string
}

func (e *SandboxNotFoundError) Error() string {
	return fmt.Sprintf("the sandbox proxy has no sandbox %s (%q)", e.SandboxID, ProxySandboxNotFound)
}

// HTTPStatusError is a non-2xx answer to a plain HTTP call (/files, /health),
// kept so callers can see the status a proxy returned.
type HTTPStatusError struct {
	Status  int
	Message string
}

func (e *HTTPStatusError) Error() string {
	return fmt.Sprintf("envd answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// IsPossibleLoss reports whether err could mean the sandbox is gone: no
// connection (refused, reset, socket missing), an HTTP 502/503/504 from a
// proxy (E2B's "sandbox not found" among them), Connect's unavailable, or a
// stream cut mid-call. The lifecycle layer
// confirms with the provider before acting; a true here is a suspicion, not a
// verdict. A caller's own cancellation is never a loss.
func IsPossibleLoss(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) && connect.CodeOf(err) == connect.CodeCanceled {
		return false
	}
	var dial *DialError
	var cut *StreamCutError
	var notFound *SandboxNotFoundError
	var status *HTTPStatusError
	switch {
	case errors.As(err, &dial), errors.As(err, &cut), errors.As(err, &notFound):
		return true
	case errors.As(err, &status):
		return status.Status == http.StatusBadGateway || status.Status == http.StatusServiceUnavailable || status.Status == http.StatusGatewayTimeout
	}
	if connect.CodeOf(err) == connect.CodeUnavailable {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF)
}

// IsNotSent reports whether err shows the request never reached envd (the
// connection could not be opened, or E2B's proxy had no sandbox to route it
// to), so whatever it asked for certainly did not run.
func IsNotSent(err error) bool {
	var dial *DialError
	var notFound *SandboxNotFoundError
	return errors.As(err, &dial) || errors.As(err, &notFound)
}

// sandboxNotFound reports whether resp is E2B's proxy answering that it has
// no sandbox id. resp's body stays readable from its start either way.
func sandboxNotFound(resp *http.Response, id string) bool {
	if resp.StatusCode != http.StatusBadGateway {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body = readCloser{Reader: io.MultiReader(bytes.NewReader(head), resp.Body), Closer: resp.Body}
	if err != nil {
		return false
	}
	var body struct {
		SandboxID string `json:"sandboxId"`
		Message   string `json:"message"`
	}
	return json.Unmarshal(head, &body) == nil && body.SandboxID == id && body.Message == ProxySandboxNotFound
}

type readCloser struct {
	io.Reader
	io.Closer
}

// IsNotFound reports whether err is Connect's not_found (an unknown pid, tag,
// watcher or path).
func IsNotFound(err error) bool { return connect.CodeOf(err) == connect.CodeNotFound }

// codeForStatus maps an HTTP status from /files or a proxy to a Connect code,
// as E2B's SDKs do.
func codeForStatus(status int) connect.Code {
	switch status {
	case http.StatusBadRequest, http.StatusNotAcceptable, http.StatusRequestedRangeNotSatisfiable:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusConflict:
		return connect.CodeAlreadyExists
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusInsufficientStorage:
		return connect.CodeResourceExhausted
	case 499:
		return connect.CodeCanceled
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported:
		return connect.CodeUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return connect.CodeUnavailable
	case http.StatusGatewayTimeout:
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeInternal
}

// responseError turns a non-2xx response into a *connect.Error carrying an
// *HTTPStatusError. envd's errors are JSON {code, message}; proxies may send
// anything, so the first bytes of any other body become the message.
func responseError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
	msg := strings.TrimSpace(string(body))
	var parsed struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &parsed) == nil && parsed.Message != "" {
		msg = parsed.Message
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return connect.NewError(codeForStatus(resp.StatusCode), &HTTPStatusError{Status: resp.StatusCode, Message: msg})
}

// transportError wraps an error from http.Client.Do. The caller's own
// cancellation becomes canceled or deadline_exceeded; everything else is
// unavailable, which IsPossibleLoss reports.
func transportError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return connect.NewError(codeForContext(ctxErr), ctxErr)
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

func codeForContext(err error) connect.Code {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeCanceled
}

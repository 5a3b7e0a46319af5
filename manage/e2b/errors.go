package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// APIError is a non-2xx answer of the management API: its status and E2B's
// error body.
type APIError struct {
	// Op is what was asked ("pause sandbox i1a2b3").
	Op string
	// Status is the HTTP status.
	Status int
	// Body is E2B's error body; for an answer that was not one, Message
	// holds the start of the text.
	Body e2bapi.Error
	// RetryAfter is the answer's Retry-After, when it had one.
	RetryAfter time.Duration
	// Attempts is how many times the call was sent.
	Attempts int
}

// newAPIError reads an error answer.
func newAPIError(op string, resp *http.Response, data []byte) *APIError {
	e := &APIError{Op: op, Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	if err := json.Unmarshal(data, &e.Body); err != nil || e.Body.Message == "" {
		text := strings.TrimSpace(string(data))
		if len(text) > 300 {
			text = text[:300] + "…"
		}
		e.Body = e2bapi.Error{Code: int32(resp.StatusCode), Message: text}
	}
	return e
}

// Error says what failed, with E2B's message, and for a refused key what to
// do about it.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "e2b api: %s: %d %s", e.Op, e.Status, http.StatusText(e.Status))
	if e.Body.Message != "" {
		b.WriteString(": " + e.Body.Message)
	}
	if e.Body.ErrorCode != "" {
		b.WriteString(" (" + e.Body.ErrorCode + ")")
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	if e.Status == http.StatusUnauthorized {
		b.WriteString("; the API key was refused: check --e2b-api-key or E2B_API_KEY")
	}
	return b.String()
}

// statusOf returns err's API status, or 0 when err is not an *APIError.
func statusOf(err error) int {
	var e *APIError
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsNotFound reports whether err is the API's 404: no such sandbox (or one
// being killed).
func IsNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

// IsConflict reports whether err is the API's 409: the sandbox is in a
// state that conflicts with the request (already paused, being killed).
func IsConflict(err error) bool { return statusOf(err) == http.StatusConflict }

// IsUnauthorized reports whether err is the API's 401: the API key is
// missing or wrong.
func IsUnauthorized(err error) bool { return statusOf(err) == http.StatusUnauthorized }

package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// resultError is a failure whose text is written for the model in full (a
// status line and the output that explains it); the result is isError with
// that text.
type resultError struct{ text string }

func (e *resultError) Error() string { return e.text }

// outputCheckBytes is the largest output JSON checked against the tool's
// output schema on every call. Larger ones (rare once file contents travel
// in their own content blocks) are not: decoding them again would cost more
// than the call. The tools' tests check every output whatever its size.
var outputCheckBytes = 64 << 10

// ModelTexter is an output that renders itself for the model: the compact,
// literal text of the result's text content (no JSON, no escaping; stdout,
// stderr and file contents as they are). Notices are not part of it: result
// prints them before it. An output without it is shown as compact JSON.
type ModelTexter interface {
	ModelText() string
}

// result renders a successful output. In the text format (the default) the
// first content block is the notices, each prefixed NOTICE:, then the
// output's ModelText (or its compact JSON when it has none); in the json
// format the notices have a block of their own and the output's JSON
// follows in another. Then come the blocks (for example file contents).
// structuredContent is the JSON, or the fuller one of a structuredCopier;
// no JSON escapes <, > or &. An output that does not match the tool's
// output schema is a bug: it is logged and the call fails.
func (c *Call) result(out any, blocks func(first int) []mcp.Content, schema *schemaCheck) *mcp.CallToolResult {
	if ns, ok := out.(noticeSetter); ok && len(c.notices) > 0 {
		ns.setNotices(c.notices)
	}
	jsonFormat := c.d.Config.ResultFormat == ResultJSON
	first := 1
	if jsonFormat && len(c.notices) > 0 {
		first = 2
	}
	var extra []mcp.Content
	if blocks != nil {
		extra = blocks(first)
	}
	raw, err := marshalLiteral(out)
	if err != nil {
		c.d.Logger.Error("tool output does not marshal", "tool", c.tool, "err", err)
		return mcp.NewToolResultError("internal error: the result could not be encoded (logged on the server)")
	}
	structured := raw
	if sc, ok := out.(structuredCopier); ok {
		if alt, ok := sc.structuredCopy(); ok {
			if structured, err = marshalLiteral(alt); err != nil {
				c.d.Logger.Error("tool output does not marshal", "tool", c.tool, "err", err)
				return mcp.NewToolResultError("internal error: the result could not be encoded (logged on the server)")
			}
		}
	}
	if len(structured) <= outputCheckBytes {
		if err := schema.checkJSON(structured); err != nil {
			c.d.Logger.Error("tool output does not match its schema", "tool", c.tool, "err", err, "output", string(structured))
			return mcp.NewToolResultError("internal error: the result does not match the tool's output schema (logged on the server)")
		}
	}
	content := make([]mcp.Content, 0, 2+len(extra))
	if jsonFormat {
		if len(c.notices) > 0 {
			content = append(content, mcp.NewTextContent(noticeText(c.notices)))
		}
		content = append(content, mcp.NewTextContent(string(raw)))
	} else {
		text := string(raw)
		if mt, ok := out.(ModelTexter); ok {
			text = mt.ModelText()
		}
		content = append(content, mcp.NewTextContent(joinNotices(c.notices, text)))
	}
	content = append(content, extra...)
	return &mcp.CallToolResult{Content: content, StructuredContent: json.RawMessage(structured)}
}

// marshalLiteral is json.Marshal without HTML escaping: <, > and & stay as
// they are (a program's output and a file's text are no HTML).
func marshalLiteral(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}

// joinNotices puts the notices (noticeText) before text, a blank line
// between them.
func joinNotices(notices []string, text string) string {
	switch {
	case len(notices) == 0:
		return text
	case text == "":
		return noticeText(notices)
	}
	return noticeText(notices) + "\n\n" + text
}

// structuredCopier is an output whose structuredContent may say more than
// its text block's JSON: structuredCopy returns that fuller output, or
// false to send the same JSON in both (read_files repeats small contents for
// clients that read only structuredContent).
type structuredCopier interface {
	structuredCopy() (any, bool)
}

// errorResult renders err as an isError result the model can act on.
func (c *Call) errorResult(err error) *mcp.CallToolResult {
	reportInputError(c.ctx, err)
	msg := c.describeError(err)
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.NewTextContent(joinNotices(c.notices, msg))}}
}

// describeError is the one place that maps error codes to text for the model.
func (c *Call) describeError(err error) string {
	var ie *InputError
	var se *manage.StaleError
	var re *resultError
	if errors.As(err, &ie) {
		return ie.Error() + "."
	}
	if errors.As(err, &re) {
		return re.text
	}
	if le, ok := manage.AsLost(err); ok {
		c.notices = append([]string{lostNotice(le)}, c.notices...)
		if le.NotRun {
			return fmt.Sprintf("%s was not run because the sandbox was lost. Nothing was executed; check the new sandbox, then retry if appropriate.", c.tool)
		}
		return fmt.Sprintf("%s failed because the sandbox was lost while it ran: %s", c.tool, rootCause(le.Cause))
	}
	if errors.As(err, &se) {
		return se.Error() + ". Start the process again if you still need it."
	}
	if errors.Is(err, context.Canceled) {
		return "The call was cancelled."
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "The call ran out of time."
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		if p, ok := codeText[ce.Code()]; ok {
			return p.prefix + ce.Message() + p.suffix
		}
	}
	c.d.Logger.Error("tool call failed", "tool", c.tool, "workspace", c.ws.Key, "err", err)
	return fmt.Sprintf("%s failed: %s", c.tool, rootCause(err))
}

// codeText is how each envd error code reads to the model.
var codeText = map[connect.Code]struct{ prefix, suffix string }{
	connect.CodeNotFound:           {"Not found: ", "."},
	connect.CodeInvalidArgument:    {"Invalid request: ", "."},
	connect.CodePermissionDenied:   {"Refused: ", "."},
	connect.CodeAlreadyExists:      {"Already exists: ", "."},
	connect.CodeResourceExhausted:  {"Out of resources in the sandbox: ", "."},
	connect.CodeFailedPrecondition: {"Cannot do that now: ", "."},
	connect.CodeUnimplemented:      {"Not supported by this sandbox: ", "."},
	connect.CodeUnavailable:        {"The sandbox is not reachable right now: ", ". Try again; if it persists, call workspace_info or workspace_reset."},
	connect.CodeDeadlineExceeded:   {"Timed out: ", "."},
	connect.CodeCanceled:           {"The call was cancelled: ", "."},
}

// rootCause shortens an error chain to a sentence for the model.
func rootCause(err error) string {
	if err == nil {
		return "unknown error"
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

func noticeText(notices []string) string {
	var b strings.Builder
	for i, n := range notices {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("NOTICE: ")
		b.WriteString(n)
	}
	return b.String()
}

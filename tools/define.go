package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/invopop/jsonschema"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Annotations are a tool's behaviour hints. All four are always sent; in
// JSON they have MCP's names.
type Annotations struct {
	ReadOnly    bool `json:"readOnlyHint"`
	Destructive bool `json:"destructiveHint"`
	Idempotent  bool `json:"idempotentHint"`
	OpenWorld   bool `json:"openWorldHint"`
}

// Meta is embedded in every tool's output: the notices that also lead the
// text content.
type Meta struct {
	Notices []string `json:"notices,omitempty" jsonschema_description:"Things the agent must know about this result (a recreated or resumed sandbox, a clamped timeout, truncated output, no isolation). Also printed first in the text, prefixed NOTICE:."`
}

func (m *Meta) setNotices(n []string) { m.Notices = n }

type noticeSetter interface{ setNotices([]string) }

// spec declares one tool: its identity, annotations and typed behaviour.
type spec[In, Out any] struct {
	name        string
	title       string
	description string
	toolset     string
	annotations Annotations
	// run does the work. It returns the output, or an error: *InputError
	// and the manage and envd errors become isError results the model can
	// act on; anything else is logged and summarised.
	run func(ctx context.Context, c *Call, in *In) (*Out, error)
	// content optionally adds content blocks after the JSON (file contents,
	// images); first is the index the first of them will have in the
	// result's content, for the output to point at them.
	content func(out *Out, first int) []mcp.Content
}

// reflector builds the schemas: inline (no $defs), closed objects, and
// required only where a field says so.
func reflector() *jsonschema.Reflector {
	return &jsonschema.Reflector{
		DoNotReference:             true,
		ExpandedStruct:             true,
		AllowAdditionalProperties:  false,
		RequiredFromJSONSchemaTags: true,
		Anonymous:                  true,
	}
}

// The input types publish the limits their handlers rely on through a
// JSONSchemaExtend method that sets them from the same constants, so schema
// and code cannot drift apart; the schema is then the only check of them.

// schemaProp returns the schema of property name of s (an object schema).
// A missing one is a programming error, caught when the tools are built.
func schemaProp(s *jsonschema.Schema, name string) *jsonschema.Schema {
	p, ok := s.Properties.Get(name)
	if !ok {
		panic("tools: schema has no property " + name)
	}
	return p
}

// schemaInt renders n as a schema number (minimum, maximum).
func schemaInt(n int64) json.Number { return json.Number(strconv.FormatInt(n, 10)) }

// schemaCount renders n as a schema count (maxItems).
func schemaCount(n int) *uint64 {
	c := uint64(n)
	return &c
}

// schemaOf returns the JSON schema of T as raw JSON, without $schema and $id
// (MCP's default dialect is 2020-12, which is what invopop produces).
func schemaOf[T any]() json.RawMessage {
	var zero T
	s := reflector().Reflect(&zero)
	s.Version = ""
	s.ID = ""
	raw, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("tools: schema of %T: %v", zero, err))
	}
	return raw
}

// define builds the Tool for s.
func define[In, Out any](d *Deps, s spec[In, Out]) Tool {
	tool := mcp.NewToolWithRawSchema(s.name, s.description, schemaOf[In]())
	tool.RawOutputSchema = schemaOf[Out]()
	tool.Title = s.title
	tool.Annotations = mcp.ToolAnnotation{
		Title:           s.title,
		ReadOnlyHint:    mcp.ToBoolPtr(s.annotations.ReadOnly),
		DestructiveHint: mcp.ToBoolPtr(s.annotations.Destructive),
		IdempotentHint:  mcp.ToBoolPtr(s.annotations.Idempotent),
		OpenWorldHint:   mcp.ToBoolPtr(s.annotations.OpenWorld),
	}
	input := compileSchema(s.name, "input", tool.RawInputSchema)
	output := compileSchema(s.name, "output", tool.RawOutputSchema)
	handler := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c := &Call{ctx: ctx, d: d, req: req, ws: WorkspaceFrom(ctx), tool: s.name, messageLimit: messageLimitFrom(ctx)}
		defer c.release()
		in := new(In)
		if err := decodeInput(ctx, req, input, in); err != nil {
			return c.errorResult(err), nil
		}
		out, err := s.run(ctx, c, in)
		if err != nil {
			return c.errorResult(err), nil
		}
		var blocks func(first int) []mcp.Content
		if s.content != nil {
			blocks = func(first int) []mcp.Content { return s.content(out, first) }
		}
		return c.result(out, blocks, output), nil
	}
	return Tool{Toolset: s.toolset, Def: tool, Handler: handler, SplitArguments: true}
}

// decodeInput decodes and validates the call's arguments into in: from the
// split arguments the transport put in ctx (WithArguments) when there are
// any, else from the request.
func decodeInput(ctx context.Context, req mcp.CallToolRequest, schema *schemaCheck, in any) error {
	if a := argumentsFrom(ctx, req.Params.Name); a != nil {
		return a.decode(schema, in)
	}
	raw, err := argsJSON(req.Params.Arguments)
	if err != nil {
		return err
	}
	return decodeRaw(raw, schema, in)
}

// decodeRaw validates raw, the arguments as JSON, and decodes it into in.
func decodeRaw(raw []byte, schema *schemaCheck, in any) error {
	if err := schema.checkJSON(raw); err != nil {
		return err
	}
	return decodeArgs(raw, in)
}

// InputError is a bad argument: the model should fix the call.
type InputError struct {
	Field string // the argument, e.g. "timeout_sec" or "files[2].path"
	Msg   string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return "invalid arguments: " + e.Msg
	}
	return fmt.Sprintf("invalid argument %s: %s", e.Field, e.Msg)
}

func inputErr(field, format string, args ...any) error {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// schemaCheck is a tool's compiled input or output schema. Its errors name
// each failing argument in words a model can act on ("invalid argument
// timeout_sec: got number, want integer").
type schemaCheck struct {
	schema *validator.Schema
}

// compileSchema compiles one of a tool's schemas (which is "input" or
// "output"). A schema that does not compile is a programming error caught at
// startup.
func compileSchema(name, which string, schema json.RawMessage) *schemaCheck {
	doc, err := validator.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		panic(fmt.Sprintf("tools: %s %s schema: %v", name, which, err))
	}
	c := validator.NewCompiler()
	url := "sandbox-mcp:/tools/" + name + "/" + which
	if err := c.AddResource(url, doc); err != nil {
		panic(fmt.Sprintf("tools: %s %s schema: %v", name, which, err))
	}
	compiled, err := c.Compile(url)
	if err != nil {
		panic(fmt.Sprintf("tools: %s %s schema: %v", name, which, err))
	}
	return &schemaCheck{schema: compiled}
}

// checkJSON validates a JSON document.
func (s *schemaCheck) checkJSON(raw []byte) error {
	inst, err := validator.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return &InputError{Msg: "arguments are not JSON: " + err.Error()}
	}
	return s.check(inst)
}

// check validates a document decoded by validator.UnmarshalJSON.
func (s *schemaCheck) check(inst any) error {
	err := s.schema.Validate(inst)
	var ve *validator.ValidationError
	if err == nil || !errors.As(err, &ve) {
		return err
	}
	return validationInputError(ve)
}

var englishPrinter = message.NewPrinter(language.English)

// validationInputError flattens a validation error to its leaves, each
// named by the argument it concerns.
func validationInputError(ve *validator.ValidationError) error {
	var leaves []*validator.ValidationError
	var walk func(e *validator.ValidationError)
	walk = func(e *validator.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	var fields, msgs []string
	for _, l := range leaves {
		field := argumentPath(l.InstanceLocation)
		msg := leafMessage(l.ErrorKind)
		fields = append(fields, field)
		msgs = append(msgs, field+": "+msg)
	}
	if len(leaves) == 1 {
		field := fields[0]
		msg := strings.TrimPrefix(msgs[0], field+": ")
		if field == "arguments" {
			field = ""
		}
		return &InputError{Field: field, Msg: msg}
	}
	return &InputError{Msg: strings.Join(msgs, "; ")}
}

// leafMessage is the validator's message for one failing keyword, with the
// bounds of numbers written out (its own reads "got 3.1622401×10⁰⁷").
func leafMessage(k validator.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Minimum:
		return fmt.Sprintf("must be at least %s (got %s)", ratText(k.Want), ratText(k.Got))
	case *kind.Maximum:
		return fmt.Sprintf("must be at most %s (got %s)", ratText(k.Want), ratText(k.Got))
	}
	return k.LocalizedString(englishPrinter)
}

// ratText writes r in plain decimal.
func ratText(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// argumentPath renders a JSON pointer as files[2].path ("arguments" for the
// root).
func argumentPath(tokens []string) string {
	if len(tokens) == 0 {
		return "arguments"
	}
	var b strings.Builder
	for i, t := range tokens {
		if _, err := strconv.Atoi(t); err == nil && i > 0 {
			fmt.Fprintf(&b, "[%s]", t)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(t)
	}
	return b.String()
}

// argsJSON returns the call's arguments as JSON ({} when absent).
func argsJSON(args any) ([]byte, error) {
	var raw []byte
	switch a := args.(type) {
	case nil:
		return []byte("{}"), nil
	case json.RawMessage:
		raw = a
	case []byte:
		raw = a
	default:
		var err error
		if raw, err = json.Marshal(a); err != nil {
			return nil, &InputError{Msg: "arguments are not JSON: " + err.Error()}
		}
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return []byte("{}"), nil
	}
	return raw, nil
}

// decodeArgs decodes the call's arguments (JSON, as argsJSON returns them)
// strictly into in. Schema validation normally catches mistakes first; this
// is the backstop that names the field.
func decodeArgs(raw []byte, in any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				field = "arguments"
			}
			return &InputError{Field: field, Msg: fmt.Sprintf("expected %s, got JSON %s", typeName(te.Type), te.Value)}
		}
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			return &InputError{Field: strings.Trim(f, `"`), Msg: "is not an argument of this tool"}
		}
		return &InputError{Msg: msg}
	}
	return nil
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return typeName(t.Elem())
	}
	return t.String()
}

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
	if errors.As(err, &ie) {
		return ie.Error() + "."
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

// progressToken returns the call's progress token, or nil.
func (c *Call) progressToken() mcp.ProgressToken {
	if c.req.Params.Meta == nil {
		return nil
	}
	return c.req.Params.Meta.ProgressToken
}

// sendProgress sends notifications/progress when the client asked for it.
func (c *Call) sendProgress(ctx context.Context, progress float64, message string) {
	tok := c.progressToken()
	if tok == nil {
		return
	}
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

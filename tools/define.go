package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/invopop/jsonschema"
	"github.com/mark3labs/mcp-go/mcp"
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
	// inputSchema, when set, edits the input schema reflected from In (for
	// example to leave out what the enabled toolsets cannot serve).
	inputSchema func(s *jsonschema.Schema)
	// outputSchema, likewise, edits the output schema reflected from Out.
	outputSchema func(s *jsonschema.Schema)
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
func schemaOf[T any]() json.RawMessage { return editedSchemaOf[T](nil) }

// editedSchemaOf is schemaOf with edit applied to the reflected schema
// (when not nil).
func editedSchemaOf[T any](edit func(*jsonschema.Schema)) json.RawMessage {
	var zero T
	s := reflector().Reflect(&zero)
	if edit != nil {
		edit(s)
	}
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
	tool := mcp.NewToolWithRawSchema(s.name, s.description, editedSchemaOf[In](s.inputSchema))
	tool.RawOutputSchema = editedSchemaOf[Out](s.outputSchema)
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

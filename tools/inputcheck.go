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

	"github.com/mark3labs/mcp-go/mcp"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

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
	case *kind.AdditionalProperties:
		verb := "is not an argument"
		if len(k.Properties) > 1 {
			verb = "are not arguments"
		}
		return fmt.Sprintf("%s %s of this tool", strings.Join(k.Properties, ", "), verb)
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

//go:build linux

package tools

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The rules below are what the agent frameworks and model APIs that take
// MCP tools impose on a tool's input schema, so that every tool converts for
// every one of them without a fallback or a rejected request:
//
//   - OpenAI strict mode (what @openai/agents' convertSchemasToStrict and
//     LangChain's strict tools send): every object closed with
//     additionalProperties: false and every property in required. Optional
//     properties are made required and nullable by the conversion, which
//     needs a closed object and a single-typed property to wrap; an open map
//     cannot be converted at all.
//   - Gemini's function declarations (an OpenAPI 3.0 subset), as reached
//     through @ai-sdk/google's converter and its like: no const (converted to
//     a non-string enum with format "enum", which the API rejects), no object
//     without properties below the root ("properties: should be non-empty
//     for OBJECT type"), no oneOf, no $ref, no format beyond a few, a single
//     type per schema, and enum values that are strings.
//
// testdata/interop/frameworks.test.mjs is the end-to-end check with the
// frameworks themselves; this test keeps the schemas inside the rules
// without node.

// portableKeywords are the schema keywords every target keeps or drops
// harmlessly, each allowed only for the types it applies to (nil: any).
var portableKeywords = map[string][]string{
	"type":                 nil,
	"description":          nil,
	"default":              nil,
	"properties":           {"object"},
	"required":             {"object"},
	"additionalProperties": {"object"},
	"items":                {"array"},
	"minItems":             {"array"},
	"maxItems":             {"array"},
	"enum":                 {"string"},
	"minLength":            {"string"},
	"maxLength":            {"string"},
	"pattern":              {"string"},
	"minimum":              {"integer", "number"},
	"maximum":              {"integer", "number"},
}

// refusedKeywords says why a keyword outside portableKeywords is refused,
// for the ones a Go struct tag can easily produce.
var refusedKeywords = map[string]string{
	"const":             "Gemini converters turn const into a non-string enum with format \"enum\", which the Gemini API rejects; use a plain type and check the value in code",
	"format":            "Gemini accepts format only as enum/date-time on strings and float/double/int32/int64 on numbers, and converters pass it through unchecked",
	"oneOf":             "Gemini has no oneOf, and OpenAI strict refuses it",
	"anyOf":             "unions convert differently in every framework; use one type",
	"allOf":             "neither Gemini nor OpenAI strict has allOf",
	"not":               "neither Gemini nor OpenAI strict has not",
	"$ref":              "converters resolve references differently or not at all; keep schemas inline",
	"$defs":             "converters resolve references differently or not at all; keep schemas inline",
	"patternProperties": "an open map: OpenAI strict and Gemini need named properties",
	"propertyNames":     "an open map: OpenAI strict and Gemini need named properties",
	"minProperties":     "OpenAI strict refuses minProperties",
	"maxProperties":     "OpenAI strict refuses maxProperties",
	"uniqueItems":       "OpenAI strict refuses uniqueItems",
	"exclusiveMinimum":  "Gemini has no exclusiveMinimum",
	"exclusiveMaximum":  "Gemini has no exclusiveMaximum",
	"prefixItems":       "Gemini has no tuples",
	"nullable":          "OpenAPI only: JSON Schema has no nullable",
}

var scalarTypes = []string{"object", "array", "string", "integer", "number", "boolean"}

// openAIStrictMaxDepth is OpenAI strict mode's limit on object nesting.
const openAIStrictMaxDepth = 10

// schemaViolations returns every way schema (a tool's input schema) breaks
// the rules above, each prefixed with the JSON path of the offending part.
func schemaViolations(raw json.RawMessage) []string {
	var root map[string]any
	if err := json.Unmarshal(raw, &root); err != nil {
		return []string{"not a JSON object: " + err.Error()}
	}
	var out []string
	report := func(path, format string, args ...any) {
		out = append(out, path+": "+fmt.Sprintf(format, args...))
	}
	var walk func(path string, s map[string]any, depth int)
	walk = func(path string, s map[string]any, depth int) {
		typ, ok := s["type"].(string)
		if !ok || !slices.Contains(scalarTypes, typ) {
			report(path, "type is %v; want exactly one of %v (no type lists, no null)", s["type"], scalarTypes)
		}
		for _, kw := range sortedKeys(s) {
			types, portable := portableKeywords[kw]
			switch {
			case !portable:
				why := refusedKeywords[kw]
				if why == "" {
					why = "not a keyword every target supports"
				}
				report(path, "keyword %s: %s", kw, why)
			case types != nil && !slices.Contains(types, typ):
				report(path, "keyword %s on a %s schema (only for %v; Gemini rejects it elsewhere)", kw, typ, types)
			}
		}
		switch typ {
		case "object":
			if depth > openAIStrictMaxDepth {
				report(path, "objects nested %d deep; OpenAI strict allows %d", depth, openAIStrictMaxDepth)
			}
			if ap, ok := s["additionalProperties"]; !ok || ap != false {
				report(path, "additionalProperties is %v; every object must be closed (false): an open map has no strict-mode or Gemini form", ap)
			}
			props, ok := s["properties"].(map[string]any)
			if !ok {
				report(path, "object without properties")
			}
			if len(props) == 0 && path != "$" {
				report(path, "object with no properties below the root: Gemini rejects it (properties should be non-empty for OBJECT type)")
			}
			var required []string
			if r, ok := s["required"]; ok {
				list, _ := r.([]any)
				if len(list) == 0 {
					report(path, "required is %v; leave it out when nothing is required", r)
				}
				for _, name := range list {
					n, _ := name.(string)
					if _, ok := props[n]; !ok {
						report(path, "required names %v, which is not a property", name)
					}
					if slices.Contains(required, n) {
						report(path, "required names %s twice", n)
					}
					required = append(required, n)
				}
			}
			for _, name := range sortedKeys(props) {
				child, ok := props[name].(map[string]any)
				if !ok {
					report(path+"."+name, "property schema is not an object")
					continue
				}
				if d, _ := child["description"].(string); strings.TrimSpace(d) == "" {
					report(path+"."+name, "no description (the model sees only the name)")
				}
				walk(path+"."+name, child, depth+1)
			}
		case "array":
			items, ok := s["items"].(map[string]any)
			if !ok {
				report(path, "array without a single items schema (Gemini needs items; no tuples)")
				break
			}
			walk(path+"[]", items, depth)
		}
		if e, ok := s["enum"]; ok {
			list, _ := e.([]any)
			if len(list) == 0 {
				report(path, "empty enum")
			}
			seen := map[string]bool{}
			for _, v := range list {
				str, isString := v.(string)
				if !isString {
					report(path, "enum value %v is not a string (Gemini converters turn it into format: enum)", v)
				}
				if seen[str] {
					report(path, "enum value %q twice", str)
				}
				seen[str] = true
			}
		}
		if d, ok := s["default"]; ok {
			if !valueFitsType(d, typ) {
				report(path, "default %v is not a %s", d, typ)
			}
			if list, ok := s["enum"].([]any); ok && !slices.Contains(list, d) {
				report(path, "default %v is not one of the enum values", d)
			}
		}
		if p, ok := s["pattern"].(string); ok {
			if _, err := regexp.Compile(p); err != nil {
				report(path, "pattern does not compile: %v", err)
			}
		}
	}
	walk("$", root, 1)
	return out
}

func valueFitsType(v any, typ string) bool {
	switch typ {
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == float64(int64(f))
	case "number":
		_, ok := v.(float64)
		return ok
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// toOpenAIStrict converts schema as the OpenAI strict conversions do: every
// property becomes required, and one that was optional becomes nullable (a
// type list with null). It returns what it could not convert.
func toOpenAIStrict(path string, s map[string]any) (map[string]any, []string) {
	out := map[string]any{}
	for k, v := range s {
		out[k] = v
	}
	var problems []string
	if out["type"] == "object" {
		if out["additionalProperties"] != false {
			problems = append(problems, path+": an object that is not closed cannot be made strict")
		}
		props, _ := s["properties"].(map[string]any)
		required := map[string]bool{}
		list, _ := s["required"].([]any)
		for _, n := range list {
			required[n.(string)] = true
		}
		newProps := map[string]any{}
		all := []any{}
		for _, name := range sortedKeys(props) {
			child, _ := props[name].(map[string]any)
			conv, p := toOpenAIStrict(path+"."+name, child)
			problems = append(problems, p...)
			if !required[name] {
				t, ok := conv["type"].(string)
				if !ok {
					problems = append(problems, path+"."+name+": an optional property without a single type cannot be made nullable")
				}
				conv["type"] = []any{t, "null"}
				if e, ok := conv["enum"].([]any); ok {
					conv["enum"] = append(slices.Clone(e), nil)
				}
			}
			newProps[name] = conv
			all = append(all, name)
		}
		out["properties"] = newProps
		out["required"] = all
	}
	if items, ok := s["items"].(map[string]any); ok {
		conv, p := toOpenAIStrict(path+"[]", items)
		problems = append(problems, p...)
		out["items"] = conv
	}
	return out, problems
}

// strictViolations checks a converted schema against OpenAI strict mode's
// own rules: closed objects whose required lists every property.
func strictViolations(path string, s map[string]any) []string {
	var out []string
	if s["type"] == "object" {
		props, _ := s["properties"].(map[string]any)
		list, _ := s["required"].([]any)
		if s["additionalProperties"] != false {
			out = append(out, path+": additionalProperties must be false")
		}
		if len(list) != len(props) {
			out = append(out, fmt.Sprintf("%s: required lists %d of %d properties", path, len(list), len(props)))
		}
		for _, name := range sortedKeys(props) {
			child, _ := props[name].(map[string]any)
			out = append(out, strictViolations(path+"."+name, child)...)
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		out = append(out, strictViolations(path+"[]", items)...)
	}
	return out
}

// TestInputSchemasPortable holds every tool's input schema to the rules of
// OpenAI strict mode and Gemini's function declarations.
func TestInputSchemasPortable(t *testing.T) {
	for _, tool := range All(NewDeps(nil, DefaultConfig(), nil)) {
		t.Run(tool.Def.Name, func(t *testing.T) {
			raw := tool.Def.RawInputSchema
			for _, v := range schemaViolations(raw) {
				t.Error(v)
			}
			var s map[string]any
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatal(err)
			}
			strict, problems := toOpenAIStrict("$", s)
			for _, p := range problems {
				t.Error("OpenAI strict conversion: " + p)
			}
			for _, v := range strictViolations("$", strict) {
				t.Error("after OpenAI strict conversion: " + v)
			}
		})
	}
}

// TestSchemaViolationsCatch proves the checker refuses each shape that broke
// a framework: the old open env map, confirm's const, a property-less
// nested object, and the keywords outside the subset.
func TestSchemaViolationsCatch(t *testing.T) {
	wrap := func(prop string) string {
		return `{"type":"object","additionalProperties":false,"properties":{"x":` + prop + `}}`
	}
	cases := []struct {
		name, schema, want string
	}{
		{"open map", wrap(`{"type":"object","description":"d","additionalProperties":{"type":"string"}}`), "every object must be closed"},
		{"const", wrap(`{"type":"boolean","description":"d","const":true}`), "keyword const"},
		{"property-less object", wrap(`{"type":"object","description":"d","properties":{},"additionalProperties":false}`), "no properties below the root"},
		{"format", wrap(`{"type":"string","description":"d","format":"uri"}`), "keyword format"},
		{"oneOf", wrap(`{"type":"string","description":"d","oneOf":[{"type":"string"}]}`), "keyword oneOf"},
		{"type list", wrap(`{"type":["string","null"],"description":"d"}`), "type is"},
		{"integer enum", wrap(`{"type":"integer","description":"d","enum":[1,2]}`), "keyword enum on a integer"},
		{"no description", wrap(`{"type":"string"}`), "no description"},
		{"minimum on a string", wrap(`{"type":"string","description":"d","minimum":1}`), "keyword minimum on a string"},
		{"array without items", wrap(`{"type":"array","description":"d"}`), "without a single items"},
		{"default outside enum", wrap(`{"type":"string","description":"d","enum":["a"],"default":"b"}`), "not one of the enum values"},
		{"open root", `{"type":"object","properties":{}}`, "every object must be closed"},
	}
	for _, tc := range cases {
		got := strings.Join(schemaViolations(json.RawMessage(tc.schema)), "\n")
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: violations %q do not mention %q", tc.name, got, tc.want)
		}
	}
	// The closed forms pass: a no-input tool's root, and a list of closed objects.
	for _, ok := range []string{
		`{"type":"object","properties":{},"additionalProperties":false}`,
		wrap(`{"type":"array","description":"d","items":{"type":"object","additionalProperties":false,"required":["name"],"properties":{"name":{"type":"string","description":"n","minLength":1}}}}`),
	} {
		if v := schemaViolations(json.RawMessage(ok)); len(v) > 0 {
			t.Errorf("%s: unexpected violations %q", ok, v)
		}
	}
}

//go:build linux

package tools

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
)

func init() {
	// Every output the tools' tests produce is checked against its schema,
	// whatever its size.
	outputCheckBytes = math.MaxInt
}

// fillContent puts each entry's content back from the content block its
// content_index names, for tests that read entries' Content.
func (o *readFilesOutput) fillContent(res *mcp.CallToolResult) {
	for i := range o.Files {
		f := &o.Files[i]
		if f.ContentIdx <= 0 || f.ContentIdx >= len(res.Content) {
			continue
		}
		if tc, ok := mcp.AsTextContent(res.Content[f.ContentIdx]); ok {
			f.Content = tc.Text
		}
	}
}

func knownTool(name string) bool { return name == "put_files" || name == "t" }

// callMessage is a tools/call request of tool with args (raw JSON).
func callMessage(tool, args string) []byte {
	return []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `,"_meta":{"progressToken":"p"}}}` + "\n")
}

// longText is n bytes of text with every kind of escape JSON has.
func longText(n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString("line \"quoted\" \\ back\tslash\r\n\x01 é 😀 \u2028 <&> ")
	}
	return b.String()
}

func jsonText(t testing.TB, v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestSplitToolCall(t *testing.T) {
	long := jsonText(t, longText(5000))
	args := `{"files":[{"path":"a.txt","content":` + long + `},{"path":"b","content":"short"}]}`
	msg := callMessage("put_files", args)
	small, a, ok := SplitToolCall(msg, knownTool)
	if !ok {
		t.Fatal("a plain tools/call was not split")
	}
	if want := strings.Replace(string(msg), args, "{}", 1); string(small) != want {
		t.Fatalf("small message\n%s\nwant\n%s", small, want)
	}
	if a.Tool() != "put_files" || string(a.raw) != args || len(a.long) != 1 || a.long[0] != longText(5000) {
		t.Fatalf("arguments: tool %q, %d long strings", a.Tool(), len(a.long))
	}
	if bytes.Contains(a.skeleton, []byte("quoted")) || !bytes.Contains(a.skeleton, []byte(`"short"`)) {
		t.Fatalf("skeleton %s", a.skeleton)
	}

	// Members in another order, whitespace, an object key that is long.
	longKey := strings.Repeat("k", 2000)
	reordered := []byte(" {\"params\" : {\"arguments\" : {\"" + longKey + "\":1} , \"name\":\"t\"},\n\"id\":\"x\",\"method\":\"tools/call\",\"jsonrpc\":\"2.0\"} \n")
	if _, a, ok := SplitToolCall(reordered, knownTool); !ok || len(a.long) != 0 || a.Tool() != "t" {
		t.Fatalf("reordered message: ok %v", ok)
	}

	for name, msg := range map[string][]byte{
		"unknown tool":         callMessage("other", args),
		"not tools/call":       bytes.Replace(msg, []byte(`"tools/call"`), []byte(`"tools/list"`), 1),
		"arguments an array":   callMessage("put_files", `[1]`),
		"arguments null":       callMessage("put_files", `null`),
		"no arguments":         []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`),
		"two arguments":        []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{},"arguments":{"a":1}}}`),
		"two methods":          []byte(`{"method":"tools/list","jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}`),
		"Arguments":            []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","Arguments":{}}}`),
		"NAME":                 []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"NAME":"t","arguments":{}}}`),
		"escaped key":          []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","argu\u006dents":{}}}`),
		"escaped name":         []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\u0074","arguments":{}}}`),
		"trailing data":        append(bytes.TrimSpace(msg), []byte(` {}`)...),
		"batch":                []byte(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}]`),
		"invalid arguments":    callMessage("t", `{"a":tru}`),
		"unclosed arguments":   []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":[1}}`),
		"bad escape":           callMessage("t", `{"a":"`+strings.Repeat("x", 2000)+`\q"}`),
		"lone surrogate":       callMessage("t", `{"a":"`+strings.Repeat("x", 2000)+`\ud800"}`),
		"raw control":          callMessage("t", "{\"a\":\""+strings.Repeat("x", 2000)+"\x01\"}"),
		"invalid UTF-8":        callMessage("t", "{\"a\":\""+strings.Repeat("x", 2000)+"\xff\"}"),
		"not an object":        []byte(`"tools/call"`),
		"empty":                nil,
		"unterminated message": msg[:len(msg)/2],
	} {
		if _, _, ok := SplitToolCall(msg, knownTool); ok {
			t.Errorf("%s: split, want the message left whole", name)
		}
	}
}

// checkSplit fails unless splitting msg gives back what encoding/json reads
// in it: the same message with {} as arguments, and the same arguments; an
// invalid msg must leave an invalid small message.
func checkSplit(t *testing.T, msg []byte) {
	small, a, ok := SplitToolCall(msg, knownTool)
	if !ok {
		return
	}
	var whole, rest map[string]any
	if !json.Valid(msg) {
		// The rest is for mcp-go to reject, as it would have msg.
		if json.Valid(small) {
			t.Fatalf("split a message that is not JSON into one that is: %q", small)
		}
		return
	}
	if err := json.Unmarshal(msg, &whole); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(small, &rest); err != nil {
		t.Fatalf("the small message is not JSON (%v): %q", err, small)
	}
	args := whole["params"].(map[string]any)["arguments"]
	whole["params"].(map[string]any)["arguments"] = map[string]any{}
	if !reflect.DeepEqual(whole, rest) {
		t.Fatalf("small message %q\nreads %v, want %v", small, rest, whole)
	}
	want, err := validator.UnmarshalJSON(bytes.NewReader(a.raw))
	if err != nil {
		t.Fatalf("the arguments span %q is not JSON: %v", a.raw, err)
	}
	inst, err := validator.UnmarshalJSON(bytes.NewReader(a.skeleton))
	if err != nil {
		t.Fatalf("skeleton %q: %v", a.skeleton, err)
	}
	got, n := a.fillValue(inst)
	if n != len(a.long) || !reflect.DeepEqual(got, want) {
		t.Fatalf("arguments read %v (%d of %d long strings), want %v", got, n, len(a.long), want)
	}
	if plain, _ := json.Marshal(args); !reflect.DeepEqual(decodeAny(t, plain), decodeAny(t, a.raw)) {
		t.Fatalf("arguments span %q is not the message's arguments %s", a.raw, plain)
	}
}

func decodeAny(t *testing.T, raw []byte) any {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func FuzzSplitToolCall(f *testing.F) {
	long := strings.Repeat("x", 1100)
	for _, args := range []string{
		`{}`, `{"a":1}`, `{"a":"` + long + `"}`, `{"a":["` + long + `\n\"\\\/\b\f\r\t\u00e9\ud83d\ude00"]}`,
		`{"` + long + `":"` + long + `"}`, `{"a":{"b":[{"c":"` + long + `"}]},"d":null}`, `{"a":"` + long + `\ud800"}`,
		`{"a" : "` + long + `" , "b":"` + long + `"}`, `{"a":"` + long + `"}}`, `{"a":"` + long,
	} {
		f.Add(string(callMessage("t", args)))
	}
	f.Add(`{"params":{"arguments":{"x":"` + long + `"},"name":"t"},"method":"tools/call"}`)
	f.Fuzz(func(t *testing.T, msg string) {
		checkSplit(t, []byte(msg))
	})
}

// TestArgumentsDecode: decoding the split arguments gives what decoding
// them whole gives, values and errors alike.
func TestArgumentsDecode(t *testing.T) {
	type nested struct {
		M map[string]string `json:"m"`
		A any               `json:"a"`
		P *string           `json:"p"`
		L []string          `json:"l"`
		S []struct {
			X string `json:"x"`
		} `json:"s"`
	}
	long := longText(3000)
	open := compileSchema("t", "input", json.RawMessage(`{}`))
	put := compileSchema("put_files", "input", schemaOf[putFilesInput]())
	for _, tc := range []struct {
		name   string
		schema *schemaCheck
		args   string
		in     func() any
		// whole: the skeleton cannot stand in for the arguments.
		whole bool
	}{
		{"put_files", put, `{"files":[{"path":"a","content":` + jsonText(t, long) + `},{"path":"b","content":` + jsonText(t, long+"2") + `,"mode":"644"}]}`, func() any { return new(putFilesInput) }, false},
		{"schema error", put, `{"files":[{"path":"","content":` + jsonText(t, long) + `}]}`, func() any { return new(putFilesInput) }, false},
		{"pattern on a long string", put, `{"files":[{"path":"a","content":"x","mode":` + jsonText(t, long) + `}]}`, func() any { return new(putFilesInput) }, false},
		{"unknown field", put, `{"files":[{"path":"a","content":` + jsonText(t, long) + `,"extra":1}]}`, func() any { return new(putFilesInput) }, false},
		{"every kind of string", open, `{"m":{"k":` + jsonText(t, long) + `},"a":` + jsonText(t, long) + `,"p":` + jsonText(t, long) +
			`,"l":["x",` + jsonText(t, long) + `],"s":[{"x":` + jsonText(t, long) + `}]}`, func() any { return new(nested) }, false},
		{"a long string where a number goes", open, `{"m":{"k":1},"a":[` + jsonText(t, long) + `],"s":` + jsonText(t, long) + `}`, func() any { return new(nested) }, true},
		{"duplicate member", open, `{"a":` + jsonText(t, long) + `,"a":` + jsonText(t, long+"!") + `}`, func() any { return new(nested) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a, ok := SplitToolCall(callMessage("t", tc.args), knownTool)
			if !ok {
				t.Fatal("not split")
			}
			got, want := tc.in(), tc.in()
			gotErr, wantErr := a.decode(tc.schema, got), decodeRaw(a.raw, tc.schema, want)
			if !reflect.DeepEqual(got, want) || errText(gotErr) != errText(wantErr) {
				t.Fatalf("split decode gave %+v, %v\nwhole decode gave %+v, %v", got, gotErr, want, wantErr)
			}
			if ok, _ := a.decodeSkeleton(tc.schema, tc.in()); ok == tc.whole {
				t.Errorf("decoded by way of the skeleton: %v, want %v", ok, !tc.whole)
			}
		})
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain text", longText(100), "\xff\xfe invalid", "\u2028\u2029", "\x00\x1f\x7f", "é😀", "a\"b\\c", "\xe2\x80", "\xe2\x80\xa8x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendJSONString([]byte("x"), s)[1:]
		if !json.Valid(out) || bytes.ContainsAny(out, "\n\r") {
			t.Fatalf("AppendJSONString(%q) = %s: not a one-line JSON string", s, out)
		}
		var got, want string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(jsonText(t, s)), &want); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("AppendJSONString(%q) reads %q, json.Marshal's reads %q", s, got, want)
		}
		if n := jsonStringLen(s); n != len(out) {
			t.Fatalf("jsonStringLen(%q) = %d, want %d", s, n, len(out))
		}
	})
}

// TestReadFilesContentBlocks: each file's bytes come in a block of their
// own, which content_index names, notices or not: in the text format the
// notices lead the first block, in the json format they have their own.
func TestReadFilesContentBlocks(t *testing.T) {
	for _, format := range []ResultFormat{ResultText, ResultJSON} {
		t.Run(string(format), func(t *testing.T) { testReadFilesContentBlocks(t, format) })
	}
}

func testReadFilesContentBlocks(t *testing.T, format ResultFormat) {
	h := newHarness(t, harnessOptions{config: Config{MaxReadBytes: 1 << 20, ResultFormat: format}})
	h.sbWrite("a.txt", "alpha\n")
	h.sbWrite("b.bin", "\x00\x01\x02")
	h.sbWrite("empty.txt", "")
	for _, extra := range []map[string]any{{}, {"limit": 2 << 20}} { // the second gets a notice first
		args := map[string]any{"paths": []string{"a.txt", "missing.txt", "b.bin", "empty.txt"}}
		for k, v := range extra {
			args[k] = v
		}
		var out readFilesOutput
		res := h.ok("read_files", args, &out)
		first := 1
		if len(out.Notices) > 0 && format == ResultJSON {
			first = 2
		}
		if len(res.Content) != first+2 {
			t.Fatalf("%d content blocks: %s", len(res.Content), resultText(res))
		}
		if f := out.Files[0]; f.ContentIdx != first || f.Content != "alpha\n" {
			t.Errorf("a.txt: content_index %d, content %q", f.ContentIdx, f.Content)
		}
		if f := out.Files[1]; f.ContentIdx != 0 || f.Error == "" {
			t.Errorf("missing.txt: content_index %d, error %q", f.ContentIdx, f.Error)
		}
		if f := out.Files[2]; f.ContentIdx != first+1 || f.Encoding != "base64" || f.Content != "AAEC" {
			t.Errorf("b.bin: content_index %d, %s %q", f.ContentIdx, f.Encoding, f.Content)
		}
		if f := out.Files[3]; f.ContentIdx != 0 || f.Content != "" {
			t.Errorf("empty.txt: content_index %d", f.ContentIdx)
		}
		if strings.Contains(res.Content[first-1].(mcp.TextContent).Text, "alpha") {
			t.Error("the JSON block carries the content too")
		}
	}
}

// TestReadFilesMessageLimit: under a message limit read_files returns what
// fits, and reading on from next_offset gets the whole file, whatever its
// bytes cost to escape.
func TestReadFilesMessageLimit(t *testing.T) {
	const limit = 256 << 10
	h := newHarness(t, harnessOptions{config: Config{MaxReadBytes: 4 << 20}})
	read := ReadFiles(h.deps)
	ctx := WithMessageLimit(WithWorkspace(context.Background(), h.ws), limit)
	files := map[string]string{
		"text.txt":    longText(700 << 10),
		"quotes.txt":  strings.Repeat(`"\`, 300<<10),
		"control.txt": strings.Repeat("\x01\x02", 200<<10),
	}
	for name, content := range files {
		h.sbWrite(name, content)
		for _, encoding := range []string{"auto", "base64"} {
			var got strings.Builder
			var offset int64
			for calls := 0; ; calls++ {
				if calls > 64 {
					t.Fatalf("%s (%s): no end after %d calls", name, encoding, calls)
				}
				// An explicit limit: exact bytes, no default line budget.
				args := jsonText(t, map[string]any{"paths": []string{name}, "offset": offset, "encoding": encoding, "limit": 4 << 20})
				res, err := read.Handler(ctx, rawCallRequest("read_files", args))
				if err != nil || res.IsError {
					t.Fatalf("%s: %v %s", name, err, resultText(res))
				}
				if wire := wireSize(t, res); wire > limit {
					t.Fatalf("%s (%s): a result of %d bytes, over the limit of %d", name, encoding, wire, limit)
				}
				var out readFilesOutput
				decodeStructured(t, res, &out)
				f := out.Files[0]
				if encoding == "base64" {
					raw, err := base64.StdEncoding.DecodeString(f.Content)
					if err != nil {
						t.Fatal(err)
					}
					got.Write(raw)
				} else {
					got.WriteString(f.Content)
				}
				if !f.Truncated {
					break
				}
				if calls == 0 && !strings.Contains(resultText(res), "messages of at most") {
					t.Errorf("%s: no notice of the message limit: %s", name, resultText(res))
				}
				offset = *f.NextOffset
			}
			if got.String() != content {
				t.Fatalf("%s (%s): read %d bytes that differ from the file's %d", name, encoding, got.Len(), len(content))
			}
		}
	}
}

// wireSize is about the size of res as the stdio transport writes it: each
// string escaped by AppendJSONString, plus the envelope.
func wireSize(t *testing.T, res *mcp.CallToolResult) int {
	n := 200 + len(jsonText(t, res.StructuredContent))
	for _, c := range res.Content {
		switch c := c.(type) {
		case mcp.TextContent:
			n += len(AppendJSONString(nil, c.Text)) + 30
		case mcp.ImageContent:
			n += len(c.Data) + len(c.MIMEType) + 50
		}
	}
	return n
}

// decodeSkeleton validates arguments with their long strings still
// placeholders (the validator copies every string it checks). That gives
// the verdict the long strings would only while no string in an input
// schema is bounded above or shaped in a way a placeholder (short, with a
// NUL) meets and a long string may not: no maxLength, format, const or
// content keywords, and every pattern rejects a placeholder. A failing
// placeholder validation is redone with the strings filled in.
func TestPlaceholdersValidateLikeLongStrings(t *testing.T) {
	d := NewDeps(nil, DefaultConfig(), nil)
	placeholder := placeholderPrefix + "0"
	patterns := 0
	var walk func(tool, at string, node any)
	walk = func(tool, at string, node any) {
		switch n := node.(type) {
		case map[string]any:
			for _, kw := range []string{"maxLength", "format", "const", "contentEncoding", "contentMediaType", "contentSchema"} {
				if _, ok := n[kw]; ok && n["type"] == "string" {
					t.Errorf("%s input schema at %s: %q on a string; a placeholder may meet it where the long string does not (see decodeSkeleton)", tool, at, kw)
				}
			}
			if p, ok := n["pattern"].(string); ok {
				patterns++
				if regexp.MustCompile(p).MatchString(placeholder) {
					t.Errorf("%s input schema at %s: pattern %q matches a placeholder (see decodeSkeleton)", tool, at, p)
				}
			}
			for k, v := range n {
				walk(tool, at+"/"+k, v)
			}
		case []any:
			for i, v := range n {
				walk(tool, fmt.Sprintf("%s/%d", at, i), v)
			}
		}
	}
	for _, tool := range All(d) {
		var schema any
		if err := json.Unmarshal(tool.Def.RawInputSchema, &schema); err != nil {
			t.Fatal(err)
		}
		walk(tool.Def.Name, "", schema)
	}
	if patterns == 0 {
		t.Fatal("no pattern found in any input schema; is the walk reaching them?")
	}
}

package tools

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math/bits"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	validator "github.com/santhosh-tekuri/jsonschema/v6"
)

// A tools/call message can be megabytes (put_files content), and mcp-go
// decodes a message many times on its way to a handler. SplitToolCall lets a
// transport take the arguments out of the message in one pass before mcp-go
// sees it: mcp-go gets the message with "arguments":{} and the handler gets
// the arguments through the call's context (WithArguments), already split
// into a small skeleton (the arguments' JSON with every long string value
// replaced by a placeholder) and the long strings, unescaped. The handler
// then decodes and validates the skeleton and puts the long strings back, so
// no JSON decoder ever walks the long strings again.

// longStringBytes is the length from which a string value of the arguments
// (quotes and escapes included) is taken out of the skeleton.
const longStringBytes = 1024

// placeholderPrefix starts every placeholder string: a NUL, then a random
// per-process nonce, so that no string a client sends can be taken for one.
var placeholderPrefix = "\x00sandbox-mcp:" + randomNonce() + ":"

// placeholderJSON is placeholderPrefix as it is written in a skeleton.
var placeholderJSON = `"\u0000` + placeholderPrefix[1:]

func randomNonce() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// Arguments are the arguments of one tools/call, taken out of its message by
// SplitToolCall.
type Arguments struct {
	tool     string
	raw      []byte   // the arguments as the client sent them
	skeleton []byte   // raw with the long string values replaced by placeholders
	long     []string // the long strings, unescaped, by placeholder index
}

// Tool is the name of the tool the arguments are for.
func (a *Arguments) Tool() string { return a.tool }

type argumentsKey struct{}

// WithArguments returns ctx carrying the arguments of the tools/call being
// served; the tool's handler takes them from there instead of from the
// request (which then holds "arguments":{}). They are used only by the tool
// they were split for.
func WithArguments(ctx context.Context, a *Arguments) context.Context {
	return context.WithValue(ctx, argumentsKey{}, a)
}

// argumentsFrom returns the arguments ctx carries for tool, or nil.
func argumentsFrom(ctx context.Context, tool string) *Arguments {
	a, _ := ctx.Value(argumentsKey{}).(*Arguments)
	if a == nil || a.tool != tool {
		return nil
	}
	return a
}

// HasArguments reports whether ctx carries split arguments for tool (the
// transport took them out of the message).
func HasArguments(ctx context.Context, tool string) bool { return argumentsFrom(ctx, tool) != nil }

// SplitToolCall takes the arguments out of msg when it is a JSON-RPC
// tools/call request of a tool known reports true for, with an object as
// arguments. It returns msg with the arguments replaced by {} and the
// arguments, or ok false when msg is anything else or anything about it is
// unusual (a duplicate or escaped member name, a name that differs from a
// member mcp-go reads only in case, invalid JSON in the arguments, a long
// string with invalid UTF-8 or a lone surrogate): such a message goes to
// mcp-go whole, and the handler decodes its arguments as before.
//
// The rest of msg is not validated here: mcp-go parses the small message
// and answers it as it would have answered msg, since msg is valid JSON
// exactly when the small message and the arguments both are.
func SplitToolCall(msg []byte, known func(tool string) bool) (small []byte, args *Arguments, ok bool) {
	s := splitter{b: msg}
	if !s.message() || s.method != "tools/call" || s.args == nil || !known(s.tool) {
		return nil, nil, false
	}
	a := s.args
	a.tool = s.tool
	small = make([]byte, 0, len(msg)-len(a.raw)+2)
	small = append(small, msg[:s.argsStart]...)
	small = append(small, "{}"...)
	small = append(small, msg[s.argsEnd:]...)
	return small, a, true
}

// splitter walks a JSON-RPC message far enough to find the method, the
// tool's name and the span of the arguments; every other value is skipped.
type splitter struct {
	b                  []byte
	i                  int
	method, tool       string
	args               *Arguments
	argsStart, argsEnd int
	seen               map[string]bool
}

func (s *splitter) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *splitter) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *splitter) message() bool {
	s.seen = map[string]bool{}
	if !s.object(s.topMember) {
		return false
	}
	s.ws()
	return s.i == len(s.b)
}

// object walks an object at s.i, calling member with s.i at each member's
// value; member must consume the value and report whether all is well.
func (s *splitter) object(member func(key string) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		if s.peek() != '"' {
			return false
		}
		end, escaped := stringEnd(s.b, s.i)
		if end < 0 || escaped {
			return false
		}
		key := string(s.b[s.i+1 : end-1])
		s.i = end
		if s.peek() != ':' {
			return false
		}
		s.i++
		s.ws()
		if !member(key) {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// claim records a member mcp-go reads: a second one, or one that matches
// only when case is ignored (encoding/json would take it), makes the message
// unusual.
func (s *splitter) claim(scope, key string, names ...string) (string, bool) {
	for _, n := range names {
		if key == n {
			if s.seen[scope+n] {
				return "", false
			}
			s.seen[scope+n] = true
			return n, true
		}
		if strings.EqualFold(key, n) {
			return "", false
		}
	}
	return "", true
}

func (s *splitter) topMember(key string) bool {
	name, ok := s.claim("", key, "method", "params")
	switch {
	case !ok:
		return false
	case name == "method":
		v, ok := s.plainString()
		s.method = v
		return ok
	case name == "params":
		return s.object(s.paramsMember)
	}
	return s.skipValue()
}

func (s *splitter) paramsMember(key string) bool {
	name, ok := s.claim("params.", key, "name", "arguments")
	switch {
	case !ok:
		return false
	case name == "name":
		v, ok := s.plainString()
		s.tool = v
		return ok
	case name == "arguments":
		if s.peek() != '{' {
			return false
		}
		s.argsStart = s.i
		s.args, s.argsEnd = lexArguments(s.b, s.i)
		s.i = s.argsEnd
		return s.args != nil
	}
	return s.skipValue()
}

// plainString reads a string value without escapes.
func (s *splitter) plainString() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	end, escaped := stringEnd(s.b, s.i)
	if end < 0 || escaped {
		return "", false
	}
	v := string(s.b[s.i+1 : end-1])
	s.i = end
	return v, true
}

// skipValue moves past the value at s.i: a string by its closing quote,
// an object or array by its matching bracket, anything else up to the next
// delimiter. It does not validate.
func (s *splitter) skipValue() bool {
	switch s.peek() {
	case 0:
		return false
	case '"':
		end, _ := stringEnd(s.b, s.i)
		s.i = end
		return end > 0
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				end, _ := stringEnd(s.b, s.i)
				if end < 0 {
					return false
				}
				s.i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return true
		}
		s.i++
	}
	return true
}

// stringEnd returns the index just past the closing quote of the string
// whose opening quote is at b[i] (-1 when it is not closed), and whether the
// string contains a backslash.
func stringEnd(b []byte, i int) (end int, escaped bool) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1, false
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n > 0 {
			escaped = true
		}
		if n%2 == 0 {
			if !escaped {
				escaped = bytes.IndexByte(b[i+1:q], '\\') >= 0
			}
			return q + 1, escaped
		}
		j = q + 1
	}
}

// lexArguments reads the object at b[start:] as a call's arguments: it
// returns them, with the skeleton and the long strings filled, and the index
// just past the object; nil when it is not a valid JSON object or a long
// string cannot be taken out exactly as encoding/json would decode it.
func lexArguments(b []byte, start int) (*Arguments, int) {
	a := &Arguments{}
	var skel []byte
	from, depth := start, 0
	i := start
	for i < len(b) {
		switch b[i] {
		case '"':
			end, escaped := stringEnd(b, i)
			if end < 0 {
				return nil, 0
			}
			if end-i >= longStringBytes && !isKey(b, end) {
				v, ok := unquoteLong(b[i+1:end-1], escaped)
				if !ok {
					return nil, 0
				}
				if skel == nil {
					skel = make([]byte, 0, 1024)
				}
				skel = append(skel, b[from:i]...)
				skel = append(skel, placeholderJSON...)
				skel = strconv.AppendInt(skel, int64(len(a.long)), 10)
				skel = append(skel, '"')
				a.long = append(a.long, v)
				from = end
			}
			i = end
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
		default:
			i++
		}
		if depth <= 0 {
			break
		}
	}
	if depth != 0 {
		return nil, 0
	}
	a.raw = b[start:i]
	if skel == nil {
		a.skeleton = a.raw
	} else {
		a.skeleton = append(skel, b[from:i]...)
	}
	if !json.Valid(a.skeleton) {
		return nil, 0
	}
	return a, i
}

// isKey reports whether the string ending at b[end] is an object key.
func isKey(b []byte, end int) bool {
	for ; end < len(b); end++ {
		switch b[end] {
		case ' ', '\t', '\r', '\n':
			continue
		case ':':
			return true
		}
		return false
	}
	return false
}

// unquoteLong decodes the inside of a JSON string as encoding/json does. It
// reports false for anything invalid, and for the inputs encoding/json
// repairs (invalid UTF-8 and lone surrogates become U+FFFD), which are left
// to it. Text between escapes is copied eight bytes at a time.
func unquoteLong(b []byte, escaped bool) (string, bool) {
	if !escaped {
		if hasControl(b) || !utf8.Valid(b) {
			return "", false
		}
		return string(b), true
	}
	// The decoded string is never longer than b; 8 bytes spare for the
	// last word copied.
	buf := make([]byte, len(b)+8)
	w := 0
	for i := 0; i < len(b); {
		if i+8 <= len(b) {
			word := binary.LittleEndian.Uint64(b[i:])
			m := bytesBelow(word, 0x20) | bytesEqual(word, '\\')
			binary.LittleEndian.PutUint64(buf[w:], word)
			if m == 0 {
				i += 8
				w += 8
				continue
			}
			k := bits.TrailingZeros64(m) / 8
			i += k
			w += k
		}
		c := b[i]
		if c >= 0x20 && c != '\\' {
			buf[w] = c
			w++
			i++
			continue
		}
		if c < 0x20 || i+1 >= len(b) {
			return "", false
		}
		switch b[i+1] {
		case '"', '\\', '/':
			buf[w] = b[i+1]
		case 'b':
			buf[w] = '\b'
		case 'f':
			buf[w] = '\f'
		case 'n':
			buf[w] = '\n'
		case 'r':
			buf[w] = '\r'
		case 't':
			buf[w] = '\t'
		case 'u':
			r, n := unescapeRune(b[i:])
			if n == 0 {
				return "", false
			}
			w += utf8.EncodeRune(buf[w:], r)
			i += n
			continue
		default:
			return "", false
		}
		w++
		i += 2
	}
	buf = buf[:w]
	// Escapes write whole runes, so this fails exactly when a run between
	// them is not UTF-8.
	if !utf8.Valid(buf) {
		return "", false
	}
	return string(buf), true
}

// unescapeRune decodes the \uXXXX escape (or surrogate pair of them) that
// starts b and returns the rune and the escape's length; 0 for an invalid
// one or a lone surrogate.
func unescapeRune(b []byte) (rune, int) {
	r, ok := hex4(b[2:])
	if !ok {
		return 0, 0
	}
	if !utf16.IsSurrogate(r) {
		return r, 6
	}
	if len(b) < 12 || b[6] != '\\' || b[7] != 'u' {
		return 0, 0
	}
	r2, ok := hex4(b[8:])
	if !ok {
		return 0, 0
	}
	if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
		return 0, 0
	}
	return r, 12
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// hasControl reports whether b has a byte below 0x20, which a JSON string
// may not hold unescaped.
func hasControl(b []byte) bool {
	for len(b) >= 8 {
		if bytesBelow(binary.LittleEndian.Uint64(b), 0x20) != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// longString returns the long string a placeholder stands for.
func (a *Arguments) longString(s string) (string, bool) {
	rest, ok := strings.CutPrefix(s, placeholderPrefix)
	if !ok {
		return "", false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || n >= len(a.long) {
		return "", false
	}
	return a.long[n], true
}

// fillValue puts the long strings back into v, a value decoded from the
// skeleton by the validator's decoder, and returns it and how many it put
// back.
func (a *Arguments) fillValue(v any) (any, int) {
	switch v := v.(type) {
	case string:
		if s, ok := a.longString(v); ok {
			return s, 1
		}
	case map[string]any:
		n := 0
		for k, e := range v {
			e, m := a.fillValue(e)
			if m > 0 {
				v[k] = e
				n += m
			}
		}
		return v, n
	case []any:
		n := 0
		for i, e := range v {
			var m int
			v[i], m = a.fillValue(e)
			n += m
		}
		return v, n
	}
	return v, 0
}

// fillTyped puts the long strings back into the strings of v, a value
// decoded from the skeleton by encoding/json, and returns how many it put
// back.
func (a *Arguments) fillTyped(v reflect.Value) int {
	switch v.Kind() {
	case reflect.String:
		if s, ok := a.longString(v.String()); ok && v.CanSet() {
			v.SetString(s)
			return 1
		}
	case reflect.Pointer:
		if !v.IsNil() {
			return a.fillTyped(v.Elem())
		}
	case reflect.Interface:
		if v.IsNil() || !v.CanSet() {
			return 0
		}
		c := reflect.New(v.Elem().Type()).Elem()
		c.Set(v.Elem())
		n := a.fillTyped(c)
		if n > 0 {
			v.Set(c)
		}
		return n
	case reflect.Struct:
		n := 0
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				n += a.fillTyped(f)
			}
		}
		return n
	case reflect.Slice, reflect.Array:
		n := 0
		for i := range v.Len() {
			n += a.fillTyped(v.Index(i))
		}
		return n
	case reflect.Map:
		n := 0
		iter := v.MapRange()
		for iter.Next() {
			c := reflect.New(iter.Value().Type()).Elem()
			c.Set(iter.Value())
			if m := a.fillTyped(c); m > 0 {
				v.SetMapIndex(iter.Key(), c)
				n += m
			}
		}
		return n
	}
	return 0
}

// decode validates the arguments against schema and decodes them into in
// (a pointer to the tool's input), with the long strings decoded once, by
// lex. Should the skeleton not decode exactly as the arguments would (a
// placeholder that did not end up in a string), the arguments are decoded
// whole.
func (a *Arguments) decode(schema *schemaCheck, in any) error {
	if len(a.long) > 0 {
		if ok, err := a.decodeSkeleton(schema, in); ok {
			return err
		}
		reflect.ValueOf(in).Elem().SetZero()
	}
	return decodeRaw(a.raw, schema, in)
}

// decodeSkeleton is decode by way of the skeleton; it reports false when the
// arguments must be decoded whole instead.
func (a *Arguments) decodeSkeleton(schema *schemaCheck, in any) (bool, error) {
	inst, err := validator.UnmarshalJSON(bytes.NewReader(a.skeleton))
	if err != nil {
		return false, nil
	}
	inst, n := a.fillValue(inst)
	if n != len(a.long) {
		return false, nil
	}
	if err := schema.check(inst); err != nil {
		return true, err
	}
	if decodeArgs(a.skeleton, in) != nil || a.fillTyped(reflect.ValueOf(in)) != len(a.long) {
		return false, nil
	}
	return true, nil
}

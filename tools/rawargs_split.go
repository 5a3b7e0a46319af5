package tools

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

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

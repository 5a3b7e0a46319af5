package search

import (
	"strconv"
	"unicode/utf8"
)

// appendMatch appends h's match record as one JSON line, as encoding/json
// writes a Record (without HTML escaping), but with no reflection and no
// allocation.
func appendMatch(b []byte, r *fileResult, h *hit) []byte {
	b = append(b, `{"type":"match","path":`...)
	b = appendString(b, r.rel)
	b = append(b, `,"line":`...)
	b = strconv.AppendInt(b, h.line, 10)
	if h.text.end > h.text.off {
		b = append(b, `,"text":`...)
		b = appendString(b, r.arena[h.text.off:h.text.end])
	}
	if h.cut {
		b = append(b, `,"cut":true`...)
	}
	b = appendLines(b, `,"before":[`, r, h.before)
	b = appendLines(b, `,"after":[`, r, h.after)
	return append(b, '}', '\n')
}

func appendLines(b []byte, key string, r *fileResult, rng [2]int) []byte {
	if rng[1] <= rng[0] {
		return b
	}
	b = append(b, key...)
	for i, s := range r.ctx[rng[0]:rng[1]] {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, r.arena[s.off:s.end])
	}
	return append(b, ']')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string the way encoding/json does with
// HTML escaping off: invalid UTF-8 becomes U+FFFD, control characters,
// U+2028 and U+2029 are escaped.
func appendString[T string | []byte](b []byte, s T) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		var r rune
		var size int
		switch v := any(s).(type) {
		case string:
			r, size = utf8.DecodeRuneInString(v[i:])
		case []byte:
			r, size = utf8.DecodeRune(v[i:])
		}
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

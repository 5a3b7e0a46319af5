package tools

import (
	"encoding/binary"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// AppendJSONString appends s to dst as a JSON string, escaped as
// encoding/json does with HTML escaping off: quotes, backslashes and control
// characters escaped, U+2028 and U+2029 too (for JavaScript), invalid UTF-8
// as U+FFFD. Text without those characters is copied eight bytes at a time:
// a file's content is escaped in one quick pass.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	if !utf8.ValidString(s) {
		return append(appendInvalidUTF8(dst, s), '"')
	}
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			// Append the next eight bytes, then keep those before the
			// first that may need escaping.
			w := load64(s, i)
			m := bytesBelow(w, 0x20) | bytesEqual(w, '"') | bytesEqual(w, '\\') | bytesEqual(w, 0xE2)
			n := len(dst)
			dst = binary.LittleEndian.AppendUint64(dst, w)
			if m == 0 {
				i += 8
				continue
			}
			k := bits.TrailingZeros64(m) / 8
			dst = dst[:n+k]
			i += k
		}
		switch c := s[i]; {
		case c == 0xE2 && i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xA8:
			// U+2028 (E2 80 A8) or U+2029 (E2 80 A9)
			dst = append(dst, `\u202`...)
			dst = append(dst, '8'+s[i+2]&1)
			i += 3
		case c < 0x20 || c == '"' || c == '\\':
			dst = appendEscape(dst, c)
			i++
		default:
			dst = append(dst, c)
			i++
		}
	}
	return append(dst, '"')
}

// jsonStringLen is len(AppendJSONString(nil, s)), counted without writing:
// the escaped characters are counted byte by byte with strings.Count, and
// the control characters other than tab, newline and return (which take
// six bytes) in the words that have any.
func jsonStringLen(s string) int {
	if !utf8.ValidString(s) {
		return len(appendInvalidUTF8(nil, s)) + 2
	}
	n := len(s) + 2 + strings.Count(s, `"`) + strings.Count(s, `\`) +
		strings.Count(s, "\n") + strings.Count(s, "\r") + strings.Count(s, "\t")
	if strings.IndexByte(s, 0xE2) >= 0 {
		n += 3 * (strings.Count(s, "\u2028") + strings.Count(s, "\u2029"))
	}
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			if bytesBelow(load64(s, i), 0x20) == 0 {
				i += 8
				continue
			}
		}
		end := min(i+8, len(s))
		for ; i < end; i++ {
			if c := s[i]; c < 0x20 && c != '\n' && c != '\r' && c != '\t' {
				n += 5
			}
		}
	}
	return n
}

const hexDigits = "0123456789abcdef"

// appendEscape appends the escape of c, a quote, backslash or control
// character.
func appendEscape(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}

// appendInvalidUTF8 is AppendJSONString's body for a string that is not
// valid UTF-8, rune by rune.
func appendInvalidUTF8(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '"' || c == '\\' {
				dst = append(dst, s[start:i]...)
				dst = appendEscape(dst, c)
				start = i + 1
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			if r == utf8.RuneError {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, `\u202`...)
				dst = append(dst, hexDigits[r&0xF])
			}
			start = i + size
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// load64 reads s[i:i+8] as a little-endian word.
func load64(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// The word helpers look at eight bytes at once. Each mask has the high bit
// of a byte set where the byte matches; above the lowest match a byte may be
// marked that does not, so only the lowest set bit locates a match.
const (
	byteOnes  = 0x0101010101010101
	byteHighs = 0x8080808080808080
)

// bytesBelow marks the bytes of w below n (n at most 0x80).
func bytesBelow(w uint64, n byte) uint64 { return (w - uint64(n)*byteOnes) &^ w & byteHighs }

// bytesEqual marks the bytes of w equal to c.
func bytesEqual(w uint64, c byte) uint64 { return bytesBelow(w^(uint64(c)*byteOnes), 1) }

package tools

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// unquoteLong decodes the inside of a JSON string as encoding/json does. It
// reports false for anything invalid, and for the inputs encoding/json
// repairs (invalid UTF-8 and lone surrogates become U+FFFD), which are left
// to it. Text between escapes is copied eight bytes at a time.
//
// A string without escapes is not copied: it shares b's memory, so the
// message it came from (which the Arguments keep as raw) is held once
// however long its strings. Callers never modify a message once it is split.
func unquoteLong(b []byte, escaped bool) (string, bool) {
	if !escaped {
		if hasControl(b) || !utf8.Valid(b) {
			return "", false
		}
		return unsafe.String(unsafe.SliceData(b), len(b)), true
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
	// buf is not written again: the string may share it.
	return unsafe.String(unsafe.SliceData(buf), len(buf)), true
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

//go:build linux

package tools

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// sourceLikeText is n bytes of text shaped like source code.
func sourceLikeText(n int) string {
	line := "\tif err := check(\"value\", x); err != nil { return fmt.Errorf(\"<%s>: %w\", name, err) } // a && b\n"
	return strings.Repeat(line, n/len(line)+1)[:n]
}

func BenchmarkAppendJSONString(b *testing.B) {
	s := sourceLikeText(8 << 20)
	buf := make([]byte, 0, len(s)*2)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = AppendJSONString(buf[:0], s)
	}
}

func BenchmarkJSONStringLen(b *testing.B) {
	s := sourceLikeText(8 << 20)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		jsonStringLen(s)
	}
}

func BenchmarkValidString(b *testing.B) {
	s := sourceLikeText(8 << 20)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		utf8.ValidString(s)
	}
}

func BenchmarkUnquoteLong(b *testing.B) {
	raw, _ := json.Marshal(sourceLikeText(8 << 20))
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, ok := unquoteLong(raw[1:len(raw)-1], true); !ok {
			b.Fatal("not unquoted")
		}
	}
}

func BenchmarkSplitToolCall(b *testing.B) {
	raw, _ := json.Marshal(sourceLikeText(8 << 20))
	msg := callMessage("put_files", `{"files":[{"path":"a","content":`+string(raw)+`}]}`)
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, _, ok := SplitToolCall(msg, knownTool); !ok {
			b.Fatal("not split")
		}
	}
}

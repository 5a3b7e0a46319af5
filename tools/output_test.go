//go:build linux

package tools

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

func TestRenderInline(t *testing.T) {
	// Whole stream: as is.
	got := renderInline(envdclient.Output{Head: []byte("héllo\n"), Total: 7}, "stdout", "l.log")
	if got.Text != "héllo\n" || got.Truncated || got.InvalidUTF8 {
		t.Fatalf("%+v", got)
	}
	// Cut inside characters on both sides: the partial characters go.
	euro := "€" // 3 bytes
	head := []byte("ab" + euro[:2])
	tail := []byte(euro[1:] + "yz")
	got = renderInline(envdclient.Output{Head: head, Tail: tail, Total: 1000, Truncated: true}, "stdout", ".sandbox-mcp/runs/g1-r1/stdout.log")
	want := "ab\n… [996 bytes omitted; full stdout in .sandbox-mcp/runs/g1-r1/stdout.log] …\nyz"
	if got.Text != want || !got.Truncated || got.InvalidUTF8 || got.Omitted != 996 || got.HeadBytes != 2 || got.TailBytes != 2 {
		t.Fatalf("%+v", got)
	}
	// Invalid bytes are replaced and reported; the log path may be missing.
	got = renderInline(envdclient.Output{Head: []byte("a\xffb"), Tail: []byte("c\xfe"), Total: 5000, Truncated: true}, "stderr", "")
	if got.Text != "a\uFFFDb\n… [4 995 bytes omitted; the full stderr could not be saved] …\nc\uFFFD" || !got.InvalidUTF8 {
		t.Fatalf("%q", got.Text)
	}
}

func TestUTF8Trims(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "",
		"abc":               "abc",
		"ab\xe2\x82":        "ab",
		"ab\xe2\x82\xac":    "ab\xe2\x82\xac",
		"ab\xf0\x9f\x98":    "ab",
		"ab\xff":            "ab\xff", // not the start of a character: kept for replacement
		"\x82\x82\x82\x82a": "\x82\x82\x82\x82a",
	} {
		if got := string(trimIncompleteSuffix([]byte(in))); got != want {
			t.Errorf("suffix %q: %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"":                  "",
		"abc":               "abc",
		"\x82\xacab":        "ab",
		"\x9f\x98\x80z":     "z",
		"\x82\x82\x82\x82a": "\x82\x82\x82\x82a", // too many to be one character
		"\x82":              "\x82",
	} {
		if got := string(trimContinuationPrefix([]byte(in))); got != want {
			t.Errorf("prefix %q: %q, want %q", in, got, want)
		}
	}
	if n := cutAtRune([]byte("ab\xe2\x82")); n != 2 {
		t.Errorf("cutAtRune: %d", n)
	}
	if n := cutAtRune([]byte("\xe2\x82")); n != 2 {
		t.Errorf("cutAtRune of only a partial character: %d", n)
	}
}

func TestGroupDigitsAndHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1 000", 10485760: "10 485 760", -1234: "-1 234"} {
		if got := groupDigits(n); got != want {
			t.Errorf("groupDigits(%d) = %q", n, got)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 4198: "4.1 KiB", 10 << 20: "10.0 MiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q", n, got)
		}
	}
}

func TestOutputMeter(t *testing.T) {
	m := &outputMeter{}
	if got := m.message(12 * time.Second); got != "12 s, 0 B stdout" {
		t.Fatal(got)
	}
	out := m.tee(0, writerFunc(func(p []byte) (int, error) { return len(p), nil }))
	errw := m.tee(1, writerFunc(func(p []byte) (int, error) { return len(p), nil }))
	out.Write([]byte("configure\ncompil"))
	out.Write([]byte("ing foo.c\n\n  \n"))
	// The line that continued across writes, not the blank ones after it.
	if got := m.message(2 * time.Second); got != "2 s, 30 B stdout, last line: compiling foo.c" {
		t.Fatal(got)
	}
	errw.Write([]byte("warn\x1b[0m: x\r"))
	if got := m.message(3 * time.Second); got != "3 s, 30 B stdout, 12 B stderr, last line: warn [0m: x" {
		t.Fatal(got)
	}
	// Of several lines in one write, the last non-blank one counts.
	m2 := &outputMeter{}
	m2.observe(0, []byte("one\ntwo\r\n \x01\nthree"))
	m2.observe(0, []byte("\n\n"))
	if got := m2.message(0); got != "0 s, 19 B stdout, last line: three" {
		t.Fatal(got)
	}
	m2.observe(0, []byte("four\nfive\r\n\t\n"))
	if got := m2.message(0); !strings.HasSuffix(got, "last line: five") {
		t.Fatal(got)
	}
	m2.observe(0, []byte("six\n"+strings.Repeat("\r\n", 1<<16)))
	if got := m2.message(0); !strings.HasSuffix(got, "last line: six") {
		t.Fatal(got)
	}
	// An unfinished line is quoted as the last line.
	out.Write([]byte("progress 50%"))
	if got := m.message(time.Second); !strings.HasSuffix(got, "last line: progress 50%") {
		t.Fatal(got)
	}
	// Lines are bounded and stay valid UTF-8.
	out.Write([]byte(strings.Repeat("é", 500) + "\xff\n"))
	got := m.message(time.Second)
	if !utf8.ValidString(got) || utf8.RuneCountInString(got) > 200 {
		t.Fatalf("%d runes: %q", utf8.RuneCountInString(got), got)
	}
	// A huge line without newline keeps memory bounded.
	out.Write([]byte(strings.Repeat("x", 1<<20)))
	if len(m.partial[0]) > 4*lastLineCap {
		t.Fatalf("partial line holds %d bytes", len(m.partial[0]))
	}
}

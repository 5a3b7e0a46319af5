//go:build linux

package tools

import (
	"bufio"
	"io"
	"strings"
	"testing"
)

// smallReader reads s through the smallest buffer bufio allows (16 bytes),
// so lines longer than that arrive in pieces.
func smallReader(s string) *bufio.Reader { return bufio.NewReaderSize(strings.NewReader(s), 16) }

func TestSkipLines(t *testing.T) {
	long := strings.Repeat("x", 40)
	tests := []struct {
		name        string
		in          string
		n           int64
		skipped     int64
		lines       int64
		wantEOF     bool
		restStarts  string
		restIsEmpty bool
	}{
		{name: "none", in: "a\nb\n", n: 0, skipped: 0, lines: 0, restStarts: "a"},
		{name: "two of three", in: "a\nbb\nc", n: 2, skipped: 5, lines: 2, restStarts: "c"},
		{name: "all, newline at the end", in: "a\nb\n", n: 2, skipped: 4, lines: 2, restIsEmpty: true},
		{name: "ends first", in: "a\n", n: 3, skipped: 2, lines: 1, wantEOF: true},
		{name: "ends in a line without newline", in: "a\nb", n: 2, skipped: 3, lines: 2, wantEOF: true},
		{name: "empty file", in: "", n: 1, skipped: 0, lines: 0, wantEOF: true},
		{name: "line longer than the buffer", in: long + "\nz", n: 1, skipped: 41, lines: 1, restStarts: "z"},
		{name: "long last line without newline", in: long, n: 1, skipped: 40, lines: 1, wantEOF: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			br := smallReader(tc.in)
			skipped, lines, err := skipLines(br, tc.n)
			if (err == io.EOF) != tc.wantEOF || err != nil && err != io.EOF {
				t.Fatalf("err = %v, want EOF %v", err, tc.wantEOF)
			}
			if skipped != tc.skipped || lines != tc.lines {
				t.Errorf("skipped %d bytes, %d lines; want %d, %d", skipped, lines, tc.skipped, tc.lines)
			}
			if tc.wantEOF {
				return
			}
			rest, _ := io.ReadAll(br)
			if tc.restIsEmpty != (len(rest) == 0) || !strings.HasPrefix(string(rest), tc.restStarts) {
				t.Errorf("rest %q, want it to start with %q", rest, tc.restStarts)
			}
		})
	}
}

func TestTakeLines(t *testing.T) {
	long := strings.Repeat("x", 32)
	tests := []struct {
		name     string
		in       string
		maxLines int64
		capN     int64
		data     string
		lines    int64
		end      takeEnd
		more     bool
	}{
		{name: "max_lines, more follows", in: "a\nb\nc\n", maxLines: 2, capN: 100, data: "a\nb\n", lines: 2, end: endMaxLines, more: true},
		{name: "max_lines at the end", in: "a\nb\n", maxLines: 2, capN: 100, data: "a\nb\n", lines: 2, end: endMaxLines},
		{name: "to the end", in: "a\nb\n", capN: 100, data: "a\nb\n", lines: 2, end: endOfFile},
		{name: "to the end, no final newline", in: "a\nb", capN: 100, data: "a\nb", lines: 2, end: endOfFile},
		{name: "empty", in: "", maxLines: 1, capN: 100, data: "", lines: 0, end: endOfFile},
		{name: "cap cuts the first line", in: "abcdef\n", maxLines: 1, capN: 3, data: "abc", lines: 1, end: endCutLine, more: true},
		{name: "cap cuts a later line", in: "ab\ncdef\n", capN: 5, data: "ab\ncd", lines: 2, end: endCutLine, more: true},
		// At a line end the cap is seen on reading the line that does not
		// fit; more says whether anything follows that line.
		{name: "cap at a line end", in: "ab\ncd\nef\n", capN: 3, data: "ab\n", lines: 1, end: endCapAtLine, more: true},
		{name: "cap at a line end, one line left", in: "ab\ncd\n", capN: 3, data: "ab\n", lines: 1, end: endCapAtLine},
		{name: "cap at a line end, a final line without newline left", in: "ab\ncd", capN: 3, data: "ab\n", lines: 1, end: endCapAtLine},
		{name: "cap at the last line end", in: "ab\n", capN: 3, data: "ab\n", lines: 1, end: endOfFile},
		{name: "line longer than the buffer", in: long + "\ny\n", maxLines: 1, capN: 100, data: long + "\n", lines: 1, end: endMaxLines, more: true},
		{name: "cap cuts a long line at a buffer boundary", in: long + "\n", capN: 32, data: long, lines: 1, end: endCutLine, more: true},
		{name: "long last line without newline", in: long, capN: 100, data: long, lines: 1, end: endOfFile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := takeLines(smallReader(tc.in), tc.maxLines, tc.capN)
			if err != nil {
				t.Fatal(err)
			}
			if string(got.data) != tc.data || got.lines != tc.lines || got.end != tc.end || got.more != tc.more {
				t.Errorf("took %q, %d lines, end %d, more %v; want %q, %d, %d, %v",
					got.data, got.lines, got.end, got.more, tc.data, tc.lines, tc.end, tc.more)
			}
		})
	}
}

func TestContinueBytes(t *testing.T) {
	tests := []struct {
		name                string
		offset, size, bytes int64
		got, want           int64
		capped, truncated   bool
		nextOffset          int64
	}{
		{name: "whole file", size: 10, bytes: 10, got: 10, want: 10},
		{name: "to the end from an offset", offset: 4, size: 10, bytes: 6, got: 6, want: 6},
		{name: "limit cut", size: 10, bytes: 4, got: 4, want: 4, capped: true, truncated: true, nextOffset: 4},
		{name: "limit cut inside a character", offset: 2, size: 10, bytes: 3, got: 4, want: 4, capped: true, truncated: true, nextOffset: 5},
		{name: "character cut at the end of the range", size: 10, bytes: 9, got: 10, want: 10, truncated: true, nextOffset: 9},
		{name: "fewer bytes than asked", size: 10, bytes: 3, got: 3, want: 4, truncated: true, nextOffset: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := readFileEntry{Offset: tc.offset, Size: tc.size, Bytes: tc.bytes}
			capped := continueBytes(&e, tc.got, tc.want)
			if capped != tc.capped || e.Truncated != tc.truncated {
				t.Fatalf("capped %v, truncated %v; want %v, %v", capped, e.Truncated, tc.capped, tc.truncated)
			}
			if tc.truncated && *e.NextOffset != tc.nextOffset {
				t.Errorf("next_offset %d, want %d", *e.NextOffset, tc.nextOffset)
			}
			if !tc.truncated && e.NextOffset != nil {
				t.Errorf("next_offset %d set on a complete read", *e.NextOffset)
			}
		})
	}
}

func TestContinueLines(t *testing.T) {
	tests := []struct {
		name              string
		entry             readFileEntry // StartLine, Offset, Size, Bytes
		take              lineTake
		capN              int64
		capped, truncated bool
		nextOffset        int64
		nextLine          int64
		note              string
	}{
		{
			name:  "to the end",
			entry: readFileEntry{StartLine: 1, Size: 4, Bytes: 4},
			take:  lineTake{data: []byte("a\nb\n"), lines: 2, end: endOfFile},
			capN:  100,
		},
		{
			name:  "max_lines, more follows",
			entry: readFileEntry{StartLine: 2, Offset: 2, Size: 10, Bytes: 4},
			take:  lineTake{data: []byte("b\nc\n"), lines: 2, end: endMaxLines, more: true},
			capN:  100, truncated: true, nextOffset: 6, nextLine: 4,
		},
		{
			name:  "max_lines, the file grew after its size was taken",
			entry: readFileEntry{StartLine: 1, Size: 2, Bytes: 2},
			take:  lineTake{data: []byte("a\n"), lines: 1, end: endMaxLines, more: true},
			capN:  100, truncated: true, nextOffset: 2, nextLine: 2,
		},
		{
			name:  "ended but shorter than its size",
			entry: readFileEntry{StartLine: 1, Size: 10, Bytes: 4},
			take:  lineTake{data: []byte("a\nb\n"), lines: 2, end: endOfFile},
			capN:  100, truncated: true, nextOffset: 4, nextLine: 3,
		},
		{
			name:  "the cap cut a line",
			entry: readFileEntry{StartLine: 3, Offset: 10, Size: 100, Bytes: 5},
			take:  lineTake{data: []byte("ab\ncd"), lines: 2, end: endCutLine, more: true},
			capN:  5, capped: true, truncated: true, nextOffset: 15,
			note: "a read cap (5 bytes) cut line 4; continue with offset 15",
		},
		{
			name:  "a character cut at the end is left out",
			entry: readFileEntry{StartLine: 1, Size: 100, Bytes: 2},
			take:  lineTake{data: []byte("ab\xc3"), lines: 1, end: endMaxLines, more: true},
			capN:  100, capped: true, truncated: true, nextOffset: 2,
			note: "a read cap (100 bytes) cut line 1; continue with offset 2",
		},
		{
			name:  "the cap reached at a line end",
			entry: readFileEntry{StartLine: 1, Size: 100, Bytes: 6},
			take:  lineTake{data: []byte("ab\ncd\n"), lines: 2, end: endCapAtLine, more: true},
			capN:  6, capped: true, truncated: true, nextOffset: 6, nextLine: 3,
			note: "the read cap (6 bytes) was reached after 2 line(s); continue with start_line 3",
		},
		{
			name:  "the cap reached before the last line, known from the size",
			entry: readFileEntry{StartLine: 1, Size: 9, Bytes: 6},
			take:  lineTake{data: []byte("ab\ncd\n"), lines: 2, end: endCapAtLine},
			capN:  6, capped: true, truncated: true, nextOffset: 6, nextLine: 3,
			note: "the read cap (6 bytes) was reached after 2 line(s); continue with start_line 3",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.entry
			capped := continueLines(&e, tc.take, tc.capN)
			if capped != tc.capped || e.Truncated != tc.truncated {
				t.Fatalf("capped %v, truncated %v; want %v, %v", capped, e.Truncated, tc.capped, tc.truncated)
			}
			if tc.truncated && *e.NextOffset != tc.nextOffset {
				t.Errorf("next_offset %d, want %d", *e.NextOffset, tc.nextOffset)
			}
			if e.NextLine != tc.nextLine || e.Note != tc.note {
				t.Errorf("next_line %d, note %q; want %d, %q", e.NextLine, e.Note, tc.nextLine, tc.note)
			}
		})
	}
}

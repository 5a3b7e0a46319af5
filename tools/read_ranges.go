package tools

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// The parts of read_files' byte and line ranges that need no sandbox: how
// lines are skipped and taken from a reader, and how a read that returned
// less than the file holds goes on.

// lineTake is what takeLines took from a file.
type lineTake struct {
	data  []byte
	lines int64 // lines in data, the last possibly partial
	end   takeEnd
	// more is true when the file goes on after data. At endCapAtLine it
	// looks past the line that did not fit (which the file's size shows).
	more bool
}

// takeEnd is why takeLines stopped.
type takeEnd int

const (
	// endMaxLines: max_lines lines were taken.
	endMaxLines takeEnd = iota
	// endOfFile: the file ended.
	endOfFile
	// endCutLine: the byte cap cut a line; data ends with its first part.
	endCutLine
	// endCapAtLine: the byte cap was reached at the end of a line.
	endCapAtLine
)

// skipLines consumes the first n lines of br and returns how many bytes
// they hold. When the file ends first the error is io.EOF, and lines is how
// many lines the file has (a last line without a newline counts).
func skipLines(br *bufio.Reader, n int64) (skipped, lines int64, err error) {
	for lines < n {
		size, err := skipLine(br)
		skipped += size
		if err == io.EOF {
			if size > 0 {
				lines++ // a last line without a newline
			}
			return skipped, lines, io.EOF
		}
		if err != nil {
			return skipped, lines, err
		}
		lines++
	}
	return skipped, lines, nil
}

// skipLine consumes one line (through its newline, or to the end) and
// returns its length.
func skipLine(br *bufio.Reader) (int64, error) {
	var n int64
	for {
		chunk, err := br.ReadSlice('\n')
		n += int64(len(chunk))
		if !errors.Is(err, bufio.ErrBufferFull) {
			return n, err
		}
	}
}

// takeLines reads up to maxLines lines from br (0: no limit), at most capN
// bytes (capN ≥ 1). A line the cap cuts is taken in part and counted.
func takeLines(br *bufio.Reader, maxLines, capN int64) (lineTake, error) {
	var t lineTake
	for maxLines == 0 || t.lines < maxLines {
		chunk, err := br.ReadSlice('\n')
		if room := capN - int64(len(t.data)); int64(len(chunk)) > room {
			if room > 0 || endsMidLine(t.data) {
				t.data = append(t.data, chunk[:room]...)
				t.lines++ // the line the cap cut
				t.end, t.more = endCutLine, true
				return t, nil
			}
			t.end, t.more = endCapAtLine, hasMore(br)
			return t, nil
		}
		t.data = append(t.data, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			// The line goes on in the next chunk.
		case err == io.EOF:
			if endsMidLine(t.data) {
				t.lines++ // a last line without a newline
			}
			t.end = endOfFile
			return t, nil
		case err != nil:
			return t, err
		default:
			t.lines++
		}
	}
	t.end, t.more = endMaxLines, hasMore(br)
	return t, nil
}

// endsMidLine reports whether data ends inside a line: it is not empty and
// its last byte is not a newline.
func endsMidLine(data []byte) bool { return len(data) > 0 && data[len(data)-1] != '\n' }

// hasMore reports whether br has another byte; any error but io.EOF counts
// as more, for the read that follows to report.
func hasMore(br *bufio.Reader) bool {
	_, err := br.Peek(1)
	return err != io.EOF
}

// truncateAt marks e as continuing at byte offset next.
func (e *readFileEntry) truncateAt(next int64) {
	e.Truncated = true
	e.NextOffset = &next
}

// continueBytes sets how a byte read goes on, from what it returned (e's
// Offset, Size and Bytes) after fetching got of the want bytes it asked
// for. It reports whether a cap cut the read (rather than the end of the
// file).
func continueBytes(e *readFileEntry, got, want int64) bool {
	if e.Offset+e.Bytes >= e.Size {
		return false
	}
	e.truncateAt(e.Offset + e.Bytes)
	return e.Offset+got < e.Size && got == want
}

// continueLines sets how a line read goes on, from what it returned (e's
// StartLine, Offset, Size and Bytes) and what it took (t) under the byte
// cap capN. It reports whether a cap cut the read (rather than max_lines or
// the end of the file).
func continueLines(e *readFileEntry, t lineTake, capN int64) bool {
	if e.Offset+e.Bytes >= e.Size && !t.more {
		return false
	}
	next := e.Offset + e.Bytes
	e.truncateAt(next)
	switch {
	case t.end == endCutLine || e.Bytes < int64(len(t.data)):
		// A line is cut (by the cap, or by the character the cut split):
		// only an offset continues it.
		e.Note = fmt.Sprintf("a read cap (%d bytes) cut line %d; continue with offset %d", capN, e.StartLine+t.lines-1, next)
		return true
	case t.end == endCapAtLine:
		e.NextLine = e.StartLine + t.lines
		e.Note = fmt.Sprintf("the read cap (%d bytes) was reached after %d line(s); continue with start_line %d", capN, t.lines, e.NextLine)
		return true
	}
	e.NextLine = e.StartLine + t.lines
	return false
}

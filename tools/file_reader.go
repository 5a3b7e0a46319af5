package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// lineReaderBufferLen is the read buffer of a line-mode read: longer lines
// are read in pieces of this size.
const lineReaderBufferLen = 64 << 10

// fileReader reads the files of one read_files call, sharing the call's
// byte budget.
type fileReader struct {
	c         *Call
	cli       *envdclient.Client
	r         *pathResolver
	encoding  string
	offset    int64
	limit     int64 // per file
	budget    int64 // left in the call
	callCap   int64
	lineMode  bool
	startLine int64
	maxLines  int64
	capped    int // files cut by a cap (not by max_lines)
	// tail reads the last this many lines instead (0: not).
	tail int64
	// lineNumbers numbers the shown lines.
	lineNumbers bool
	// modelBudget is a read without a limit: at most maxLines lines, and
	// over-long lines shown cut.
	modelBudget bool
}

// read reads one path. The entry is filled as far as possible even when an
// error is returned.
func (fr *fileReader) read(ctx context.Context, field, p string) (readFileEntry, error) {
	e := readFileEntry{Path: p}
	if p == "" {
		return e, inputErr(field, "is empty; give a workspace-relative file path")
	}
	res, err := fr.r.resolve(ctx, field, p)
	if res.abs != "" {
		e.Path = fr.r.rel(res.abs)
	}
	if err != nil {
		return e, fr.relError(err)
	}
	if !res.exists {
		return e, connect.NewError(connect.CodeNotFound, fmt.Errorf("file %q does not exist in the workspace", e.Path))
	}
	st, real := res.entry, res.real
	switch st.Type {
	case envdclient.TypeFile:
	case envdclient.TypeDir:
		return e, inputErr(field, "%q is a directory; list it with list_files", e.Path)
	default:
		return e, inputErr(field, "%q is not a regular file (%s)", e.Path, st.Permissions)
	}
	e.Size = st.Size
	switch {
	case fr.tail > 0:
		err = fr.readTail(ctx, &e, real)
	case fr.lineMode:
		err = fr.readLines(ctx, &e, real)
	default:
		err = fr.readRange(ctx, &e, real)
	}
	if err == nil {
		err = fr.decorate(ctx, &e, real)
	}
	if err != nil {
		if envdclient.IsNotFound(err) {
			return e, connect.NewError(connect.CodeNotFound, fmt.Errorf("file %q was removed while it was read", e.Path))
		}
		return e, fr.relError(fr.c.Check(err))
	}
	return e, nil
}

// relError makes the paths in an envd error workspace-relative, keeping its
// code; a lost sandbox passes unchanged.
func (fr *fileReader) relError(err error) error {
	var ce *connect.Error
	if err == nil || isLost(err) || !errors.As(err, &ce) {
		return err
	}
	return connect.NewError(ce.Code(), errors.New(relText(fr.r.root, ce.Message())))
}

// outOfBudget marks e as left out when the call's cap is used up, and
// reports whether it was.
func (fr *fileReader) outOfBudget(e *readFileEntry) bool {
	if fr.budget > 0 {
		return false
	}
	e.truncateAt(0)
	e.Note = fmt.Sprintf("not read: the call's read cap of %d bytes was used by the files before it; read this file in another call", fr.callCap)
	return true
}

// readRange reads [offset, offset+limit) within the call's budget.
func (fr *fileReader) readRange(ctx context.Context, e *readFileEntry, real string) error {
	e.Offset = fr.offset
	if e.Offset >= e.Size {
		if e.Offset > e.Size {
			e.Note = fmt.Sprintf("offset %d is past the end of the file (%d bytes)", e.Offset, e.Size)
		}
		return nil
	}
	if fr.outOfBudget(e) {
		return nil
	}
	want := min(fr.limit, fr.budget, e.Size-e.Offset)
	data, size, err := readRange(ctx, fr.cli, real, e.Offset, want)
	if err != nil {
		return err
	}
	e.Size = size
	got := int64(len(data))
	atEOF := e.Offset+got >= size
	lineCut := false
	wholeImage := e.Offset == 0 && atEOF && imageType(data) != ""
	if fr.modelBudget && !wholeImage {
		if n := lineEnd(data, fr.maxLines); n < len(data) {
			data, atEOF, lineCut = data[:n], false, true
		}
	}
	fr.render(e, data, atEOF, e.Offset == 0 && atEOF)
	fr.budget -= e.Bytes
	if lineCut {
		continueBytes(e, int64(len(data)), want)
		e.Note = fmt.Sprintf("showing %d lines, the default; read on from offset %d (or give limit or max_lines)", fr.maxLines, e.Offset+e.Bytes)
		return nil
	}
	if continueBytes(e, got, want) {
		fr.capped++
	}
	return nil
}

// lineEnd returns the length of data's first n lines (len(data) when it
// has no more than n).
func lineEnd(data []byte, n int64) int {
	end := 0
	for i := int64(0); i < n; i++ {
		j := bytes.IndexByte(data[end:], '\n')
		if j < 0 {
			return len(data)
		}
		end += j + 1
	}
	return end
}

// readTail reads the last fr.tail lines of the file, within the caps: the
// end of the file is fetched and cut back to the start of the first line
// wanted (or of the first whole line, when the caps hold fewer).
func (fr *fileReader) readTail(ctx context.Context, e *readFileEntry, real string) error {
	if e.Size == 0 {
		return nil
	}
	if fr.outOfBudget(e) {
		return nil
	}
	want := min(fr.limit, fr.budget, e.Size)
	start := e.Size - want
	data, size, err := readRange(ctx, fr.cli, real, start, want)
	if err != nil {
		return err
	}
	e.Size = size
	// The last line's newline does not start another line.
	body := bytes.TrimSuffix(data, []byte{'\n'})
	cut, found := 0, false
	for i, n := len(body), int64(0); ; {
		j := bytes.LastIndexByte(body[:i], '\n')
		if j < 0 {
			break
		}
		if n++; n == fr.tail {
			cut, found = j+1, true
			break
		}
		i = j
	}
	if !found && start > 0 {
		// The caps hold fewer lines than asked: begin at a whole line.
		if j := bytes.IndexByte(data, '\n'); j >= 0 && j+1 < len(data) {
			cut = j + 1
		}
		e.Note = fmt.Sprintf("the read cap (%d bytes) holds fewer than the %d lines asked", want, fr.tail)
	}
	e.Offset = start + int64(cut)
	fr.render(e, data[cut:], true, e.Offset == 0)
	fr.budget -= e.Bytes
	return nil
}

// decorate sets e.shown, the text the model reads, when it differs from the
// bytes: lines numbered (line_numbers; lines before a byte offset are
// counted in the file) and, in a default read, over-long lines cut.
func (fr *fileReader) decorate(ctx context.Context, e *readFileEntry, real string) error {
	if e.Encoding != "text" || e.Content == "" || !fr.lineNumbers && !fr.modelBudget {
		return nil
	}
	first := int64(0)
	if fr.lineNumbers {
		switch {
		case e.StartLine > 0:
			first = e.StartLine
		case e.Offset == 0:
			first = 1
		default:
			n, err := countLines(ctx, fr.cli, real, e.Offset)
			if err != nil {
				return err
			}
			first = n + 1
		}
		e.LineNumbers = true
	}
	maxChars := 0
	if fr.modelBudget {
		maxChars = maxShownLineChars
	}
	shown, cut := shownText(e.Content, first, maxChars)
	if cut > 0 {
		note := fmt.Sprintf("%d line(s) longer than %d characters are shown cut; read them with offset and limit", cut, maxShownLineChars)
		if e.Note != "" {
			note = e.Note + "; " + note
		}
		e.Note = note
	}
	if shown != e.Content {
		e.shown = shown
	}
	return nil
}

// shownText returns text with each line prefixed by its number and a tab
// (counting from first; 0: no numbers) and lines longer than maxChars
// characters (0: no limit) cut with a marker, and how many were cut.
func shownText(text string, first int64, maxChars int) (string, int) {
	var b strings.Builder
	b.Grow(len(text) + len(text)/8)
	cut := 0
	n := first
	for len(text) > 0 {
		line, rest, nl := strings.Cut(text, "\n")
		text = rest
		if first > 0 {
			b.WriteString(strconv.FormatInt(n, 10))
			b.WriteByte('\t')
			n++
		}
		if maxChars > 0 && len(line) > maxChars && utf8.RuneCountInString(line) > maxChars {
			k := 0
			for i := range line {
				if k == maxChars {
					fmt.Fprintf(&b, "%s… [line cut: %d more characters]", line[:i], utf8.RuneCountInString(line[i:]))
					break
				}
				k++
			}
			cut++
		} else {
			b.WriteString(line)
		}
		if nl {
			b.WriteByte('\n')
		}
	}
	return b.String(), cut
}

// countLines counts the newlines in the first n bytes of the file abs,
// streaming them.
func countLines(ctx context.Context, cli *envdclient.Client, abs string, n int64) (int64, error) {
	dl, err := cli.DownloadRange(ctx, abs, 0, n)
	if err != nil {
		return 0, err
	}
	defer dl.Close()
	buf := make([]byte, 64<<10)
	var lines int64
	for {
		m, err := dl.Read(buf)
		lines += int64(bytes.Count(buf[:m], []byte{'\n'}))
		if err == io.EOF {
			return lines, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// readRange returns the bytes [offset, offset+n) of the sandbox file abs
// (fewer at its end) and the file's size: as envd reported it, or the end of
// what was read when that is further (the file grew) or the size is unknown.
// Only io.EOF means the file is shorter; any other error (a body cut
// mid-stream included) is returned, as it may mean a lost sandbox.
func readRange(ctx context.Context, cli *envdclient.Client, abs string, offset, n int64) ([]byte, int64, error) {
	dl, err := cli.DownloadRange(ctx, abs, offset, n)
	if err != nil {
		return nil, 0, err
	}
	defer dl.Close()
	// One allocation of what the file holds there, at most n; more room is
	// made only if the file grew since the response began.
	want := n
	if dl.Size >= 0 {
		want = min(n, max(dl.Size-offset, 0))
	}
	data := make([]byte, 0, want)
	for int64(len(data)) < n {
		if len(data) == cap(data) {
			data = slices.Grow(data, int(min(n-int64(len(data)), max(int64(len(data)), 512))))
		}
		m, err := dl.Read(data[len(data):min(cap(data), int(n))])
		data = data[:len(data)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, err
		}
	}
	size := dl.Size
	if end := offset + int64(len(data)); size < 0 || len(data) > 0 && size < end {
		size = end
	}
	return data, size, nil
}

// readLines reads max_lines lines from start_line, streaming past the lines
// before it (memory stays bounded by the caps whatever the file's size).
func (fr *fileReader) readLines(ctx context.Context, e *readFileEntry, real string) error {
	e.StartLine = fr.startLine
	if fr.outOfBudget(e) {
		return nil
	}
	dl, err := fr.cli.DownloadRange(ctx, real, 0, -1)
	if err != nil {
		return err
	}
	defer dl.Close()
	if dl.Size >= 0 {
		e.Size = dl.Size
	}
	br := bufio.NewReaderSize(dl, lineReaderBufferLen)
	skipped, lines, err := skipLines(br, fr.startLine-1)
	if err == io.EOF {
		e.Offset = skipped
		e.Note = fmt.Sprintf("start_line %d is past the end of the file, which has %d line(s)", fr.startLine, lines)
		return nil
	}
	if err != nil {
		return err
	}
	e.Offset = skipped
	capN := min(fr.limit, fr.budget)
	t, err := takeLines(br, fr.maxLines, capN)
	if err != nil {
		return err
	}
	fr.render(e, t.data, !t.more, false)
	e.Lines = t.lines
	fr.budget -= e.Bytes
	if continueLines(e, t, capN) {
		fr.capped++
	}
	return nil
}

// render stores data in e by the call's encoding. atEOF says data ends at the
// end of the file (a rune cut by the range end is trimmed otherwise); whole
// says data is the whole file (images are recognised only then).
func (fr *fileReader) render(e *readFileEntry, data []byte, atEOF, whole bool) {
	if fr.encoding == "auto" {
		if mime := imageType(data); mime != "" {
			if whole {
				e.Encoding, e.MimeType = "image", mime
				e.imageData = base64.StdEncoding.EncodeToString(data)
				e.Bytes = int64(len(data))
				return
			}
			if e.Offset == 0 {
				e.Note = fmt.Sprintf("this %s image (%d bytes) is larger than the read cap, so it is returned as base64 pieces, not as an image", mime, e.Size)
			}
		}
	}
	text := data
	if !atEOF {
		text = trimIncompleteSuffix(data)
	}
	switch {
	case fr.encoding == "base64":
	case fr.encoding == "text":
		e.Encoding, e.Bytes = "text", int64(len(text))
		e.Content, e.InvalidUTF8 = validText(text)
		if e.InvalidUTF8 {
			fr.c.Notice("%s is not valid UTF-8: invalid bytes were replaced with U+FFFD; read it with encoding base64 for the exact bytes.", e.Path)
		}
		return
	case utf8.Valid(text) && bytes.IndexByte(text, 0) < 0:
		e.Encoding, e.Bytes, e.Content = "text", int64(len(text)), string(text)
		return
	}
	e.Encoding, e.Bytes = "base64", int64(len(data))
	e.Content = base64.StdEncoding.EncodeToString(data)
}

// imageType returns the MIME type of an image format models can view, by
// its magic bytes, or "".
func imageType(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(b, []byte{0xFF, 0xD8, 0xFF}):
		return "image/jpeg"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "image/gif"
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}

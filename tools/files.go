package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/invopop/jsonschema"

	"github.com/sandbox-mcp/sandbox-mcp/envd/client"
)

// Caps of the file tools that are not operator settings.
const (
	maxPutFiles         = 1000
	maxReadPaths        = 100
	defaultListDepth    = 2
	maxListDepth        = 10
	defaultListEntries  = 1000
	maxListEntries      = 5000
	progressEvery       = 250 * time.Millisecond
	lineReaderBufferLen = 64 << 10
)

// ---------------------------------------------------------------- put_files

type putFilesInput struct {
	Files []putFileSpec `json:"files" jsonschema:"required,minItems=1" jsonschema_description:"The files to write (1 to 1000). All are validated and uploaded before any is moved into place: if one fails, none is changed."`
}

// JSONSchemaExtend publishes the limits runPutFiles relies on.
func (putFilesInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "files").MaxItems = schemaCount(maxPutFiles)
}

type putFileSpec struct {
	Path     string `json:"path" jsonschema:"required,minLength=1" jsonschema_description:"Workspace-relative path of the file. Missing parent directories are created; an existing file is replaced (keeping its mode unless mode is given)."`
	Content  string `json:"content" jsonschema:"required" jsonschema_description:"The file's content: plain text, or base64 when encoding is base64 (use base64 for binary data)."`
	Encoding string `json:"encoding,omitempty" jsonschema:"enum=text,enum=base64,default=text" jsonschema_description:"How content is encoded: text (default, written as UTF-8) or base64."`
	Mode     string `json:"mode,omitempty" jsonschema:"pattern=^(0o)?[0-7][0-7][0-7][0-7]?$" jsonschema_description:"Optional octal permission mode such as 644, 0755 or 0o600. Default: 0644 for a new file, the old mode for a replaced one."`
}

type putFilesOutput struct {
	Meta
	Written []writtenFile `json:"written" jsonschema_description:"The files written, in the order given."`
}

type writtenFile struct {
	Path  string `json:"path" jsonschema_description:"Workspace-relative path of the file."`
	Bytes int64  `json:"bytes" jsonschema_description:"Size of the file in bytes."`
	Mode  string `json:"mode,omitempty" jsonschema_description:"The file's permission mode, in octal (for example 0644)."`
}

// PutFiles is the put_files tool: it writes files into the workspace,
// all-or-nothing per call, creating parents, with optional modes. The
// decoded content of one call is capped at Config.MaxPutBytes.
func PutFiles(d *Deps) Tool {
	return define(d, spec[putFilesInput, putFilesOutput]{
		name:  "put_files",
		title: "Write files",
		description: fmt.Sprintf("Write one or more files into the workspace (text, or base64 for binary), creating missing parent directories and replacing existing files. "+
			"The call is all-or-nothing: every file is checked and uploaded under a temporary name first, and only when all succeeded are they moved into place. "+
			"Optionally set each file's mode (for example 0755 for a script). At most %d files and %d bytes of decoded content per call; "+
			"bring bigger inputs in with stage_inputs.", maxPutFiles, d.Config.MaxPutBytes),
		toolset:     ToolsetFiles,
		annotations: Annotations{ReadOnly: false, Destructive: true, Idempotent: true, OpenWorld: false},
		run:         runPutFiles,
	})
}

// putPlan is one checked file of a put_files call.
type putPlan struct {
	data    []byte
	mode    fs.FileMode
	hasMode bool
}

func runPutFiles(ctx context.Context, c *Call, in *putFilesInput) (*putFilesOutput, error) {
	// The schema checks the number of files, that paths are not empty, the
	// encodings and the shape of modes.
	limit := c.d.Config.MaxPutBytes
	plans := make([]putPlan, len(in.Files))
	var total int64
	for i, f := range in.Files {
		field := fmt.Sprintf("files[%d]", i)
		data, err := decodeContent(field, f.Content, f.Encoding)
		if err != nil {
			return nil, err
		}
		total += int64(len(data))
		if total > limit {
			return nil, inputErr("files", "the decoded content adds up to more than the server's cap of %d bytes per put_files call (reached at %s); split the files over several calls, or bring large inputs in with stage_inputs", limit, field)
		}
		plans[i].data = data
		if f.Mode != "" {
			m, err := parseMode(field+".mode", f.Mode)
			if err != nil {
				return nil, err
			}
			plans[i].mode, plans[i].hasMode = m, true
		}
	}

	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	r := newPathResolver(c, lease.Sandbox.Workdir, lease.Client)
	items := make([]uploadItem, len(in.Files))
	seen := map[string]int{}
	for i, f := range in.Files {
		field := fmt.Sprintf("files[%d].path", i)
		dest, shown, err := resolveFileDest(ctx, r, field, f.Path)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[dest]; dup {
			return nil, inputErr(field, "%q is the same file as files[%d].path; give each file once per call", f.Path, j)
		}
		seen[dest] = i
		data := plans[i].data
		items[i] = uploadItem{
			dest: dest, shown: shown, field: field,
			open:    func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
			mode:    plans[i].mode,
			hasMode: plans[i].hasMode,
		}
	}
	batch := &uploadBatch{c: c, r: r, items: items, progress: progressReporter(ctx, c, len(items), "uploaded")}
	results, err := batch.run(ctx)
	if err != nil {
		return nil, err
	}
	out := &putFilesOutput{Written: make([]writtenFile, len(items))}
	for i, it := range items {
		out.Written[i] = writtenFile{Path: it.shown, Bytes: int64(len(plans[i].data)), Mode: octalMode(results[i].mode)}
	}
	return out, nil
}

// resolveFileDest resolves p as the destination of a file write: inside the
// workspace, not the root, not ending in "/". It returns the path to write
// (a symlink resolved to its target, so the link survives) and the
// workspace-relative path to show.
func resolveFileDest(ctx context.Context, r *pathResolver, field, p string) (dest, shown string, err error) {
	if strings.HasSuffix(p, "/") {
		return "", "", inputErr(field, "path %q ends with /; give the path of a file", p)
	}
	res, err := r.resolve(ctx, field, p)
	if err != nil {
		return "", "", err
	}
	if res.abs == r.root {
		return "", "", inputErr(field, "path %q is the workspace root; give the path of a file", p)
	}
	return res.real, r.rel(res.abs), nil
}

// decodeContent decodes a put_files content by its encoding. Base64 may be
// standard or URL-safe, padded or not, and may contain line breaks.
func decodeContent(field, content, encoding string) ([]byte, error) {
	switch encoding {
	case "", "text":
		return []byte(content), nil
	case "base64":
		s := content
		if strings.ContainsAny(s, " \t") {
			// The decoder skips \r and \n itself; spaces and tabs are ours.
			s = strings.Map(func(r rune) rune {
				if r == ' ' || r == '\t' {
					return -1
				}
				return r
			}, s)
		}
		enc := base64.StdEncoding
		if strings.ContainsAny(s, "-_") {
			enc = base64.URLEncoding
		}
		if !strings.HasSuffix(strings.TrimRight(s, "\r\n"), "=") && base64Len(s)%4 != 0 {
			enc = enc.WithPadding(base64.NoPadding)
		}
		data, err := enc.DecodeString(s)
		if err != nil {
			return nil, inputErr(field+".content", "is not valid base64 (%v); encode binary data as standard base64, or use encoding text", err)
		}
		return data, nil
	default:
		return nil, inputErr(field+".encoding", "%q is not an encoding; use text or base64", encoding)
	}
}

// base64Len counts the characters of s that are not line breaks.
func base64Len(s string) int {
	return len(s) - strings.Count(s, "\n") - strings.Count(s, "\r")
}

// progressReporter returns a function that reports "<verb> n of total files"
// as progress, at most every progressEvery (and always for the last file).
func progressReporter(ctx context.Context, c *Call, total int, verb string) func(int) {
	var last time.Time
	return func(done int) {
		if done < total && time.Since(last) < progressEvery {
			return
		}
		last = time.Now()
		c.sendProgress(ctx, float64(done), fmt.Sprintf("%s %d of %d files", verb, done, total))
	}
}

// --------------------------------------------------------------- read_files

type readFilesInput struct {
	Paths     []string `json:"paths" jsonschema:"required,minItems=1" jsonschema_description:"Workspace-relative paths of the files to read (1 to 100)."`
	Offset    int64    `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Byte offset to start reading at, in every file (default 0). Use a file's next_offset to continue where a truncated read stopped. Not combinable with start_line."`
	Limit     int64    `json:"limit,omitempty" jsonschema:"minimum=1" jsonschema_description:"Maximum bytes to return per file. Default and ceiling: the server's read cap (workspace_info shows max_read_bytes), which also bounds the whole call."`
	Encoding  string   `json:"encoding,omitempty" jsonschema:"enum=auto,enum=text,enum=base64,default=auto" jsonschema_description:"auto (default): text when the bytes are UTF-8 without NUL bytes, otherwise base64, and PNG/JPEG/GIF/WebP images read whole come back as images. text: always text, invalid bytes replaced by U+FFFD. base64: always base64."`
	StartLine int64    `json:"start_line,omitempty" jsonschema:"minimum=1" jsonschema_description:"Read by lines instead of bytes: the first line to return (1-based). The result's next_line continues after the last line returned."`
	MaxLines  int64    `json:"max_lines,omitempty" jsonschema:"minimum=1" jsonschema_description:"Read by lines: at most this many lines (from start_line, default 1). The byte caps still apply."`
}

// JSONSchemaExtend publishes the limits runReadFiles relies on.
func (readFilesInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "paths").MaxItems = schemaCount(maxReadPaths)
}

type readFilesOutput struct {
	Meta
	Files []readFileEntry `json:"files" jsonschema_description:"One entry per path, in the order given."`
	Bytes int64           `json:"bytes" jsonschema_description:"File bytes returned in this call, all files together."`
}

type readFileEntry struct {
	Path        string `json:"path" jsonschema_description:"The path as read, relative to the workspace."`
	Content     string `json:"-"` // sent once, in the content block at ContentIdx
	ContentIdx  int    `json:"content_index,omitempty" jsonschema:"minimum=1" jsonschema_description:"Index in the result's content array of the block that holds the bytes read: a text block (text, or base64 when encoding is base64) or an image block. Absent when nothing was read (an error, an empty file or range)."`
	Encoding    string `json:"encoding,omitempty" jsonschema:"enum=text,enum=base64,enum=image" jsonschema_description:"How the content block at content_index holds the bytes: text, base64 (a text block of base64), or image (an image block)."`
	MimeType    string `json:"mime_type,omitempty" jsonschema_description:"The image type, for encoding image."`
	Size        int64  `json:"size" jsonschema_description:"Size of the whole file in bytes."`
	Offset      int64  `json:"offset" jsonschema_description:"Byte offset where the returned content starts."`
	Bytes       int64  `json:"bytes" jsonschema_description:"Number of file bytes returned (before any base64)."`
	Truncated   bool   `json:"truncated" jsonschema_description:"True when the file continues after what was returned."`
	NextOffset  *int64 `json:"next_offset,omitempty" jsonschema_description:"Byte offset to pass as offset to read on from here (set when truncated)."`
	StartLine   int64  `json:"start_line,omitempty" jsonschema_description:"In line mode: the line number the content starts at."`
	Lines       int64  `json:"lines,omitempty" jsonschema_description:"In line mode: the number of lines returned (the last may be partial when a byte cap cut it)."`
	NextLine    int64  `json:"next_line,omitempty" jsonschema_description:"In line mode: the start_line that continues after this read (set when more lines follow)."`
	InvalidUTF8 bool   `json:"invalid_utf8_replaced,omitempty" jsonschema_description:"True when encoding text replaced bytes that are not UTF-8 with U+FFFD; read with base64 for the exact bytes."`
	Note        string `json:"note,omitempty" jsonschema_description:"Why less than asked was returned, when a cap or the end of the file explains it."`
	Error       string `json:"error,omitempty" jsonschema_description:"Why this file could not be read (other files are still returned)."`

	imageData string // base64 of an image, sent as image content, not in JSON
}

// ReadFiles is the read_files tool: byte or line ranges of workspace files,
// as text, base64 or image content, within Config.MaxReadBytes per call.
func ReadFiles(d *Deps) Tool {
	return define(d, spec[readFilesInput, readFilesOutput]{
		name:  "read_files",
		title: "Read files",
		description: fmt.Sprintf("Read one or more workspace files: text as text, binary as base64, and PNG/JPEG/GIF/WebP images as images. "+
			"Each file's bytes come once, in a content block of their own after the JSON, which names it by content_index. "+
			"Read by bytes (offset, limit) or by lines (start_line, max_lines); each truncated file gives next_offset (and next_line) to continue. "+
			"At most %d bytes per call across all files; files past that are returned empty with truncated set. "+
			"A path that cannot be read gets an error entry while the others are still returned. To see what exists, use list_files.", d.Config.MaxReadBytes),
		toolset:     ToolsetFiles,
		annotations: Annotations{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false},
		run:         runReadFilesFitted,
		content:     readFilesContent,
	})
}

// fileReader reads the files of one read_files call, sharing the call's
// byte budget.
type fileReader struct {
	c         *Call
	cli       *client.Client
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
}

func runReadFiles(ctx context.Context, c *Call, in *readFilesInput) (*readFilesOutput, error) {
	cfg := c.d.Config
	// The schema checks the number of paths, the ranges and the encoding.
	if in.Offset > 0 && (in.StartLine > 0 || in.MaxLines > 0) {
		return nil, inputErr("offset", "give either offset (bytes) or start_line/max_lines (lines), not both")
	}
	readCap := c.readCap()
	fr := &fileReader{
		c: c, encoding: in.Encoding, offset: in.Offset, limit: readCap,
		budget: readCap, callCap: readCap,
		lineMode: in.StartLine > 0 || in.MaxLines > 0, startLine: max(in.StartLine, 1), maxLines: in.MaxLines,
	}
	if fr.encoding == "" {
		fr.encoding = "auto"
	}
	if in.Limit > 0 {
		if in.Limit > cfg.MaxReadBytes {
			c.Notice("limit %d was lowered to the server's read cap of %d bytes.", in.Limit, cfg.MaxReadBytes)
		}
		fr.limit = min(in.Limit, readCap)
	}
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	fr.cli = lease.Client
	fr.r = newPathResolver(c, lease.Sandbox.Workdir, lease.Client)

	out := &readFilesOutput{Files: make([]readFileEntry, 0, len(in.Paths))}
	var failures []error
	for i, p := range in.Paths {
		e, err := fr.read(ctx, fmt.Sprintf("paths[%d]", i), p)
		if err != nil {
			if isLost(err) || ctx.Err() != nil {
				return nil, err
			}
			failures = append(failures, err)
			e.Error = fileErrorText(err)
		}
		out.Bytes += e.Bytes
		out.Files = append(out.Files, e)
	}
	if len(failures) == len(in.Paths) {
		if len(failures) == 1 {
			return nil, failures[0]
		}
		parts := make([]string, len(out.Files))
		for i, f := range out.Files {
			parts[i] = fmt.Sprintf("%q: %s", f.Path, f.Error)
		}
		return nil, inputErr("paths", "none of the %d files could be read (%s)", len(failures), strings.Join(parts, "; "))
	}
	if fr.capped > 0 {
		c.Notice("%d file(s) were only partly returned because of the read caps (%d bytes per file, %d bytes per call); read on from each file's next_offset.",
			fr.capped, fr.limit, fr.callCap)
	}
	return out, nil
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
	case client.TypeFile:
	case client.TypeDir:
		return e, inputErr(field, "%q is a directory; list it with list_files", e.Path)
	default:
		return e, inputErr(field, "%q is not a regular file (%s)", e.Path, st.Permissions)
	}
	e.Size = st.Size
	if fr.lineMode {
		err = fr.readLines(ctx, &e, real)
	} else {
		err = fr.readRange(ctx, &e, real)
	}
	if err != nil {
		if client.IsNotFound(err) {
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

// budgetNote explains a file left out because the call's cap was used up.
func (fr *fileReader) budgetNote() string {
	return fmt.Sprintf("not read: the call's read cap of %d bytes was used by the files before it; read this file in another call", fr.callCap)
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
	if fr.budget <= 0 {
		fr.markTruncated(e, 0)
		e.Note = fr.budgetNote()
		return nil
	}
	want := min(fr.limit, fr.budget, e.Size-e.Offset)
	data, size, err := readRange(ctx, fr.cli, real, e.Offset, want)
	if err != nil {
		return err
	}
	e.Size = size
	atEOF := e.Offset+int64(len(data)) >= size
	capped := !atEOF && int64(len(data)) == want
	fr.render(e, data, atEOF, e.Offset == 0 && atEOF)
	fr.budget -= e.Bytes
	if e.Offset+e.Bytes < e.Size {
		fr.markTruncated(e, e.Offset+e.Bytes)
		if capped {
			fr.capped++
		}
	}
	return nil
}

// readRange returns the bytes [offset, offset+n) of the sandbox file abs
// (fewer at its end) and the file's size: as envd reported it, or the end of
// what was read when that is further (the file grew) or the size is unknown.
// Only io.EOF means the file is shorter; any other error (a body cut
// mid-stream included) is returned, as it may mean a lost sandbox.
func readRange(ctx context.Context, cli *client.Client, abs string, offset, n int64) ([]byte, int64, error) {
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

func (fr *fileReader) markTruncated(e *readFileEntry, next int64) {
	e.Truncated = true
	e.NextOffset = &next
}

// readLines reads max_lines lines from start_line, streaming past the lines
// before it (memory stays bounded by the caps whatever the file's size).
func (fr *fileReader) readLines(ctx context.Context, e *readFileEntry, real string) error {
	e.StartLine = fr.startLine
	if fr.budget <= 0 {
		fr.markTruncated(e, 0)
		e.Note = fr.budgetNote()
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

	var off int64
	line := int64(1)
	for line < fr.startLine {
		n, newline, err := skipLine(br)
		off += n
		if err == io.EOF {
			lines := line - 1
			if n > 0 {
				lines = line // a last line without a newline
			}
			e.Offset = off
			e.Note = fmt.Sprintf("start_line %d is past the end of the file, which has %d line(s)", fr.startLine, lines)
			return nil
		}
		if err != nil {
			return err
		}
		if newline {
			line++
		}
	}
	e.Offset = off

	capN := min(fr.limit, fr.budget)
	var buf []byte
	var lines int64
	// partial: part of the current line is in buf; cut: a cap cut a line;
	// full: the cap was reached at a line boundary.
	partial, eof, cut, full := false, false, false, false
	for fr.maxLines == 0 || lines < fr.maxLines {
		chunk, err := br.ReadSlice('\n')
		if room := capN - int64(len(buf)); int64(len(chunk)) > room {
			if room > 0 || partial {
				buf = append(buf, chunk[:room]...)
				lines++ // the line the cap cut
				cut = true
			} else {
				full = true
			}
			break
		}
		buf = append(buf, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			partial = true
			continue
		case err == io.EOF:
			if partial || len(chunk) > 0 {
				lines++
			}
			eof = true
		case err != nil:
			return err
		default:
			lines++
			partial = false
			continue
		}
		break
	}
	more := !eof
	if more && !cut {
		if _, err := br.Peek(1); err == io.EOF {
			more = false
		}
	}
	fr.render(e, buf, !more, false)
	e.Lines = lines
	fr.budget -= e.Bytes
	if e.Offset+e.Bytes < e.Size || more {
		fr.markTruncated(e, e.Offset+e.Bytes)
		switch {
		case cut || e.Bytes < int64(len(buf)):
			fr.capped++
			e.Note = fmt.Sprintf("a read cap (%d bytes) cut line %d; continue with offset %d", capN, fr.startLine+lines-1, e.Offset+e.Bytes)
		case full:
			fr.capped++
			e.NextLine = fr.startLine + lines
			e.Note = fmt.Sprintf("the read cap (%d bytes) was reached after %d line(s); continue with start_line %d", capN, lines, e.NextLine)
		default:
			e.NextLine = fr.startLine + lines
		}
	}
	return nil
}

// skipLine consumes one line (through its newline, or to the end).
func skipLine(br *bufio.Reader) (n int64, newline bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		n += int64(len(chunk))
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return n, err == nil, err
	}
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
		if utf8.Valid(text) {
			e.Content = string(text)
		} else {
			e.Content = strings.ToValidUTF8(string(text), "\uFFFD")
			e.InvalidUTF8 = true
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

// fileErrorText is the per-file error text of read_files.
func fileErrorText(err error) string {
	var ie *InputError
	if errors.As(err, &ie) {
		return ie.Msg
	}
	return rootCause(err)
}

// --------------------------------------------------------------- list_files

type listFilesInput struct {
	Path       string `json:"path,omitempty" jsonschema:"default=." jsonschema_description:"Workspace-relative directory to list (default: the workspace root). A file gives just its own entry."`
	Depth      int    `json:"depth,omitempty" jsonschema:"minimum=1" jsonschema_description:"How many levels to descend: 1 lists only the directory's entries. Default 2, or enough for glob (10 when it contains **)."`
	Glob       string `json:"glob,omitempty" jsonschema_description:"Only entries whose workspace-relative path (or path relative to path) matches: * and ? within a name, [abc] classes, ** for any number of directories (for example **/*.go)."`
	MaxEntries int    `json:"max_entries,omitempty" jsonschema:"minimum=1" jsonschema_description:"At most this many entries are returned (default 1000); total says how many matched."`
}

// JSONSchemaExtend publishes the limits runListFiles relies on.
func (listFilesInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "depth").Maximum = schemaInt(maxListDepth)
	schemaProp(s, "max_entries").Maximum = schemaInt(maxListEntries)
}

type listFilesOutput struct {
	Meta
	Path      string      `json:"path" jsonschema_description:"The directory listed, relative to the workspace."`
	Entries   []fileEntry `json:"entries" jsonschema_description:"Entries in depth-first order, names sorted within a directory."`
	Total     int         `json:"total" jsonschema_description:"Entries that matched (before max_entries cut the list)."`
	Truncated bool        `json:"truncated" jsonschema_description:"True when max_entries cut the list; narrow it with path, depth or glob."`
}

type fileEntry struct {
	Path          string `json:"path" jsonschema_description:"Workspace-relative path."`
	Type          string `json:"type" jsonschema:"enum=file,enum=dir,enum=symlink,enum=other" jsonschema_description:"file, dir, symlink (not followed), or other (socket, pipe, device)."`
	Size          int64  `json:"size" jsonschema_description:"Size in bytes."`
	Mode          string `json:"mode" jsonschema_description:"Permission bits in octal (for example 0644)."`
	Modified      string `json:"modified" jsonschema_description:"Last modification time (RFC 3339, UTC)."`
	SymlinkTarget string `json:"symlink_target,omitempty" jsonschema_description:"For symlinks: where the link leads, relative to the workspace when inside it, absolute otherwise."`
}

// ListFiles is the list_files tool: a directory tree to a depth, filtered
// by an optional glob and capped at max_entries. The tools' own run logs
// (.sandbox-mcp) show as one directory entry; their contents are listed
// only when path or glob names that directory.
func ListFiles(d *Deps) Tool {
	return define(d, spec[listFilesInput, listFilesOutput]{
		name:  "list_files",
		title: "List files",
		description: "List a workspace directory to a depth (default 2) with each entry's type, size, mode and modification time, optionally filtered by a glob (** matches any number of directories). " +
			"At most max_entries entries (default 1000, up to 5000); total and truncated say when more matched. " +
			"The tools' own run logs live in .sandbox-mcp; their contents are listed only when path or glob names that directory.",
		toolset:     ToolsetFiles,
		annotations: Annotations{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false},
		run:         runListFiles,
	})
}

func runListFiles(ctx context.Context, c *Call, in *listFilesInput) (*listFilesOutput, error) {
	// The schema checks the ranges of depth and max_entries.
	maxEntries := in.MaxEntries
	if maxEntries == 0 {
		maxEntries = defaultListEntries
	}
	var g *globPattern
	depth := in.Depth
	if in.Glob != "" {
		var err error
		if g, err = compileGlob("glob", in.Glob); err != nil {
			return nil, err
		}
		if depth == 0 {
			if _, d := g.base(); d < 0 {
				depth = maxListDepth
			} else {
				depth = min(len(g.segs), maxListDepth)
			}
		}
	}
	if depth == 0 {
		depth = defaultListDepth
	}
	p := in.Path
	if p == "" {
		p = "."
	}
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	cli := lease.Client
	r := newPathResolver(c, lease.Sandbox.Workdir, cli)
	res, err := r.resolve(ctx, "path", p)
	if err != nil {
		return nil, err
	}
	abs, base := res.abs, r.rel(res.abs)
	out := &listFilesOutput{Path: base, Entries: []fileEntry{}}
	if !res.exists {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%q does not exist in the workspace", base))
	}
	st := res.entry
	var entries []client.Entry
	if st.Type == client.TypeDir {
		if entries, err = cli.ListDir(ctx, abs, uint32(depth)); err != nil {
			return nil, c.Check(err)
		}
	} else {
		st.Path = abs
		entries = []client.Entry{st}
	}
	showToolData := base == toolDataDir || underToolData(base) || (g != nil && g.namesToolData())
	for _, e := range entries {
		rel := r.rel(e.Path)
		if !showToolData && underToolData(rel) {
			continue
		}
		if g != nil && !g.match(rel) && (base == "." || !g.match(strings.TrimPrefix(rel, base+"/"))) {
			continue
		}
		out.Total++
		if len(out.Entries) >= maxEntries {
			continue
		}
		out.Entries = append(out.Entries, entryOut(r, rel, e))
	}
	if out.Total > len(out.Entries) {
		out.Truncated = true
		c.Notice("list_files shows %d of %d matching entries (max_entries %d); narrow the listing with path, depth or glob.", len(out.Entries), out.Total, maxEntries)
	}
	return out, nil
}

// entryOut renders an envd entry for the model.
func entryOut(r *pathResolver, rel string, e client.Entry) fileEntry {
	fe := fileEntry{
		Path: rel, Size: e.Size, Mode: octalMode(fs.FileMode(e.Mode)),
		Modified: e.ModTime.UTC().Format(time.RFC3339),
	}
	switch e.Type {
	case client.TypeFile:
		fe.Type = "file"
	case client.TypeDir:
		fe.Type = "dir"
	case client.TypeSymlink:
		fe.Type = "symlink"
		t := path.Clean(e.SymlinkTarget)
		if path.IsAbs(t) && r.within(t) {
			t = r.rel(t)
		}
		fe.SymlinkTarget = t
	default:
		fe.Type = "other"
	}
	return fe
}

package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/invopop/jsonschema"
)

// maxReadPaths bounds the paths of one read_files call.
const maxReadPaths = 100

// The default budget of a read, fit for a model's context: a read that
// sets no limit (and no max_lines) returns at most defaultReadLines lines
// and defaultReadBytes bytes per file, whichever comes first, and shows
// lines longer than maxShownLineChars cut, with a marker. An explicit limit
// or max_lines reads exact ranges up to the server's caps.
const (
	defaultReadLines  = 2000
	defaultReadBytes  = 256 << 10
	maxShownLineChars = 2000
)

type readFilesInput struct {
	Paths       []string `json:"paths" jsonschema:"required,minItems=1" jsonschema_description:"Workspace-relative paths of the files to read (1 to 100)."`
	Offset      int64    `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Byte offset to start reading at, in every file (default 0). Use a file's next_offset to continue where a truncated read stopped. Not combinable with start_line or tail."`
	Limit       int64    `json:"limit,omitempty" jsonschema:"minimum=1" jsonschema_description:"Maximum bytes to return per file, read exactly. Default: 2000 lines or 256 KiB per file, whichever comes first, with lines longer than 2000 characters shown cut. Ceiling: the server's read cap (workspace_info shows max_read_bytes), which also bounds the whole call."`
	Tail        int64    `json:"tail,omitempty" jsonschema:"minimum=1" jsonschema_description:"Read the last this many lines of each file instead of its start (within the byte caps). Not combinable with offset or start_line."`
	LineNumbers bool     `json:"line_numbers,omitempty" jsonschema_description:"Show each text line prefixed by its line number and a tab (default false). Only the shown text is numbered: structuredContent's content keeps the bare bytes."`
	Encoding    string   `json:"encoding,omitempty" jsonschema:"enum=auto,enum=text,enum=base64,default=auto" jsonschema_description:"auto (default): text when the bytes are UTF-8 without NUL bytes, otherwise base64, and PNG/JPEG/GIF/WebP images read whole come back as images. text: always text, invalid bytes replaced by U+FFFD. base64: always base64."`
	StartLine   int64    `json:"start_line,omitempty" jsonschema:"minimum=1" jsonschema_description:"Read by lines instead of bytes: the first line to return (1-based). The result's next_line continues after the last line returned."`
	MaxLines    int64    `json:"max_lines,omitempty" jsonschema:"minimum=1" jsonschema_description:"Read by lines: at most this many lines (from start_line; default 2000). The byte caps still apply."`
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
	ContentIdx  int    `json:"content_index,omitempty" jsonschema:"minimum=1" jsonschema_description:"Index in the result's content array of the block that shows what was read: a text block (the text, numbered with line_numbers and with over-long lines cut in a default read; or base64 when encoding is base64) or an image block. Absent when nothing was read (an error, an empty file or range)."`
	Inline      string `json:"content,omitempty" jsonschema_description:"structuredContent only, when all the call's contents together are small (at most 64 KiB): the same bytes as the content block at content_index (text, or base64 for base64 and image), for clients that read only structuredContent. Larger reads send the bytes once, in the content blocks."`
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
	LineNumbers bool   `json:"line_numbers,omitempty" jsonschema_description:"True when the content block shows each line prefixed by its number and a tab (line_numbers was asked); content and the file keep the bare bytes."`
	Note        string `json:"note,omitempty" jsonschema_description:"Why less than asked was returned, when a cap or the end of the file explains it."`
	Error       string `json:"error,omitempty" jsonschema_description:"Why this file could not be read (other files are still returned)."`

	imageData string // base64 of an image, sent as image content, not in JSON
	// shown is the text the content block shows when it differs from
	// Content (lines numbered, long lines cut); Content keeps the bytes.
	shown string
}

// ReadFiles is the read_files tool: byte or line ranges of workspace files,
// as text, base64 or image content, within Config.MaxReadBytes per call.
func ReadFiles(d *Deps) Tool {
	return define(d, spec[readFilesInput, readFilesOutput]{
		name:  "read_files",
		title: "Read files",
		description: fmt.Sprintf("Read one or more workspace files: text as text, binary as base64, and PNG/JPEG/GIF/WebP images as images. "+
			"Each file's content comes once, in a content block of its own after a line per file saying what was read and how to read on (the entry's content_index names the block). "+
			"By default each file returns at most 2000 lines or 256 KiB, whichever comes first, and lines longer than 2000 characters are shown cut. "+
			"Read by bytes (offset, limit), by lines (start_line, max_lines) or the end (tail: the last N lines); line_numbers: true numbers the lines; each truncated file gives next_offset (and next_line) to continue. "+
			"At most %d bytes per call across all files; files past that are returned empty with truncated set. "+
			"A path that cannot be read gets an error entry while the others are still returned. To see what exists, use list_files.", d.Config.MaxReadBytes),
		toolset:     ToolsetFiles,
		annotations: Annotations{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false},
		run:         runReadFilesFitted,
		content:     readFilesContent,
	})
}

func runReadFiles(ctx context.Context, c *Call, in *readFilesInput) (*readFilesOutput, error) {
	cfg := c.d.Config
	// The schema checks the number of paths, the ranges and the encoding.
	if in.Offset > 0 && (in.StartLine > 0 || in.MaxLines > 0) {
		return nil, inputErr("offset", "give either offset (bytes) or start_line/max_lines (lines), not both")
	}
	if in.Tail > 0 && (in.Offset > 0 || in.StartLine > 0 || in.MaxLines > 0) {
		return nil, inputErr("tail", "reads the end of each file: give it without offset, start_line or max_lines")
	}
	readCap := c.readCap()
	fr := &fileReader{
		c: c, encoding: in.Encoding, offset: in.Offset, limit: readCap,
		budget: readCap, callCap: readCap,
		lineMode: in.StartLine > 0 || in.MaxLines > 0, startLine: max(in.StartLine, 1), maxLines: in.MaxLines,
		tail: in.Tail, lineNumbers: in.LineNumbers, modelBudget: in.Limit == 0,
	}
	if fr.modelBudget {
		fr.limit = min(defaultReadBytes, readCap)
		if fr.maxLines == 0 {
			fr.maxLines = defaultReadLines
		}
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

// fileErrorText is the per-file error text of read_files.
func fileErrorText(err error) string {
	var ie *InputError
	if errors.As(err, &ie) {
		return ie.Msg
	}
	return rootCause(err)
}

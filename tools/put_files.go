package tools

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/invopop/jsonschema"
)

// maxPutFiles bounds the files of one put_files call.
const maxPutFiles = 1000

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
	bigger := "split bigger inputs over several calls."
	if d.Config.hasToolset(ToolsetTransfer) {
		bigger = "bring bigger inputs in with stage_inputs."
	}
	return define(d, spec[putFilesInput, putFilesOutput]{
		name:  "put_files",
		title: "Write files",
		description: fmt.Sprintf("Write one or more files into the workspace (text, or base64 for binary), creating missing parent directories and replacing existing files. "+
			"The call is all-or-nothing: every file is checked and uploaded under a temporary name first, and only when all succeeded are they moved into place. "+
			"Optionally set each file's mode (for example 0755 for a script). At most %d files and %d bytes of decoded content per call; %s",
			maxPutFiles, d.Config.MaxPutBytes, bigger),
		toolset:     ToolsetFiles,
		annotations: Annotations{ReadOnly: false, Destructive: true, Idempotent: true, OpenWorld: false},
		run:         runPutFiles,
	})
}

// putPlan is one checked file of a put_files call.
type putPlan struct {
	size    int64
	open    func() io.Reader
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
		size, open, err := decodeContent(field, f.Content, f.Encoding)
		if err != nil {
			return nil, err
		}
		total += size
		if total > limit {
			return nil, inputErr("files", "the decoded content adds up to more than the server's cap of %d bytes per put_files call (reached at %s); split the files over several calls, or bring large inputs in with stage_inputs", limit, field)
		}
		plans[i].size, plans[i].open = size, open
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
		open := plans[i].open
		items[i] = uploadItem{
			dest: dest, shown: shown, field: field,
			open:    func() (io.ReadCloser, error) { return io.NopCloser(open()), nil },
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
		out.Written[i] = writtenFile{Path: it.shown, Bytes: plans[i].size, Mode: octalMode(results[i].mode)}
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

// decodeContent checks a put_files content by its encoding and returns its
// decoded size and a way to open it decoded. Base64 may be standard or
// URL-safe, padded or not, and may contain line breaks. Content is never
// held decoded: it is decoded once to check it and count its bytes, and
// again, streaming, while it is uploaded, so a call costs its message and
// not several copies of it.
func decodeContent(field, content, encoding string) (size int64, open func() io.Reader, err error) {
	switch encoding {
	case "", "text":
		return int64(len(content)), func() io.Reader { return strings.NewReader(content) }, nil
	case "base64":
		enc := base64.StdEncoding
		if strings.ContainsAny(content, "-_") {
			enc = base64.URLEncoding
		}
		if !strings.HasSuffix(strings.TrimRight(content, "\r\n\t "), "=") && base64Len(content)%4 != 0 {
			enc = enc.WithPadding(base64.NoPadding)
		}
		open := func() io.Reader {
			// The decoder skips \r and \n itself; spaces and tabs are ours.
			return base64.NewDecoder(enc, &blankFilter{r: strings.NewReader(content)})
		}
		n, err := io.Copy(io.Discard, open())
		if err != nil {
			return 0, nil, inputErr(field+".content", "is not valid base64 (%v); encode binary data as standard base64, or use encoding text", err)
		}
		return n, open, nil
	default:
		return 0, nil, inputErr(field+".encoding", "%q is not an encoding; use text or base64", encoding)
	}
}

// blankFilter reads r without its spaces and tabs.
type blankFilter struct{ r io.Reader }

func (f *blankFilter) Read(p []byte) (int, error) {
	for {
		n, err := f.r.Read(p)
		w := 0
		for _, c := range p[:n] {
			if c != ' ' && c != '\t' {
				p[w] = c
				w++
			}
		}
		if w > 0 || err != nil {
			return w, err
		}
	}
}

// base64Len counts the characters of s that are not line breaks or blanks.
func base64Len(s string) int {
	return len(s) - strings.Count(s, "\n") - strings.Count(s, "\r") - strings.Count(s, " ") - strings.Count(s, "\t")
}

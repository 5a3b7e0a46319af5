package tools

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/invopop/jsonschema"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// Caps and defaults of collect_outputs.
const (
	maxCollectGlobs     = 20
	defaultCollectFiles = 100
	maxCollectFiles     = 1000
	defaultCollectBytes = 100 << 20
	maxCollectBytes     = 4 << 30
	maxCollectDepth     = 32
)

type collectOutputsInput struct {
	Globs      []string `json:"globs" jsonschema:"required,minItems=1" jsonschema_description:"Workspace-relative patterns of the files to collect (1 to 20): * and ? within a name, [abc] classes, ** for any number of directories (for example out/**/*.csv). Only regular files are collected."`
	Inline     bool     `json:"inline,omitempty" jsonschema_description:"Also return the content of small text files inline, within the server's read cap for the whole call."`
	MaxFiles   int      `json:"max_files,omitempty" jsonschema:"minimum=1" jsonschema_description:"Collect at most this many files (default 100); the first in path order are kept."`
	MaxBytes   int64    `json:"max_bytes,omitempty" jsonschema:"minimum=1" jsonschema_description:"Collect at most this many bytes in total (default 100 MiB)."`
	NamePrefix string   `json:"name_prefix,omitempty" jsonschema_description:"Optional prefix for the artifact names (for example run-2/), so a later collection does not replace these."`
}

// JSONSchemaExtend publishes the limits runCollectOutputs relies on.
func (collectOutputsInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "globs").MaxItems = schemaCount(maxCollectGlobs)
	schemaProp(s, "max_files").Maximum = schemaInt(maxCollectFiles)
	schemaProp(s, "max_bytes").Maximum = schemaInt(maxCollectBytes)
}

type collectOutputsOutput struct {
	Meta
	Artifacts []artifactOut `json:"artifacts" jsonschema_description:"The files collected, in path order."`
	Matched   int           `json:"matched" jsonschema_description:"Regular files that matched the globs (before the caps); past max_files the listing stops, so it is then a lower bound."`
	LimitsHit []string      `json:"limits_hit,omitempty" jsonschema_description:"Caps that cut the list: max_files or max_bytes."`
	Unmatched []string      `json:"unmatched,omitempty" jsonschema_description:"Globs that matched no file."`
}

type artifactOut struct {
	Name           string `json:"name" jsonschema_description:"The artifact's name: name_prefix plus the file's workspace-relative path."`
	Ref            string `json:"ref" jsonschema_description:"artifact://NAME, to bring it back with stage_inputs (also after the sandbox is recreated)."`
	Path           string `json:"path" jsonschema_description:"The workspace-relative path it was collected from."`
	Bytes          int64  `json:"bytes" jsonschema_description:"Size in bytes."`
	SHA256         string `json:"sha256" jsonschema_description:"SHA-256 of the content, hex."`
	Content        string `json:"content,omitempty" jsonschema_description:"The file's text, when inline was asked and it fits."`
	ContentOmitted string `json:"content_omitted,omitempty" jsonschema_description:"Why the content is not inline although inline was asked."`
}

// CollectOutputs is the collect_outputs tool: files matching globs are
// copied out of the sandbox into the host artifact store (replacing
// artifacts of the same name), optionally inlined.
func CollectOutputs(d *Deps) Tool {
	here := ""
	if d.Config.ArtifactsDir == "" {
		here = " This server has no artifact store, so calls fail until its operator configures one."
	}
	return define(d, spec[collectOutputsInput, collectOutputsOutput]{
		name:  "collect_outputs",
		title: "Collect outputs",
		description: "Copy files matching globs (** for any number of directories) out of the sandbox into the artifact store on the host, where they survive the sandbox; " +
			"each gets a ref artifact://NAME that stage_inputs brings back, for example after a recreation. An artifact of the same name is replaced. " +
			fmt.Sprintf("With inline, small text files also come back in the result (at most %d bytes in all); binary files and images are stored but not inlined. ", d.Config.MaxReadBytes) +
			"Caps: max_files (default 100) and max_bytes (default 100 MiB); limits_hit says when they cut the list." + here,
		toolset:     ToolsetTransfer,
		annotations: Annotations{ReadOnly: false, Destructive: true, Idempotent: true, OpenWorld: false},
		run:         runCollectOutputs,
	})
}

// collectFile is one matched file.
type collectFile struct {
	abs, rel string
	size     int64
	mode     fs.FileMode
}

// collectPlan is a checked collect_outputs request.
type collectPlan struct {
	globs    []*globPattern
	prefix   string // the artifact names' prefix, cleaned; "" for none
	maxFiles int
	maxBytes int64
	inline   bool
	// matchedAtLeast: the listing stopped past max_files, so the files
	// matched are a lower bound.
	matchedAtLeast bool
}

// checkCollect validates the arguments that need no sandbox, so a bad call
// fails before one is created.
func checkCollect(in *collectOutputsInput) (*collectPlan, error) {
	// The schema checks the number of globs and the ranges of the caps.
	p := &collectPlan{
		globs:    make([]*globPattern, len(in.Globs)),
		maxFiles: cmp.Or(in.MaxFiles, defaultCollectFiles),
		maxBytes: cmp.Or(in.MaxBytes, defaultCollectBytes),
		inline:   in.Inline,
	}
	for i, g := range in.Globs {
		var err error
		if p.globs[i], err = compileGlob(fmt.Sprintf("globs[%d]", i), g); err != nil {
			return nil, err
		}
	}
	if in.NamePrefix != "" {
		var err error
		if p.prefix, err = cleanArtifactName("name_prefix", in.NamePrefix); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func runCollectOutputs(ctx context.Context, c *Call, in *collectOutputsInput) (*collectOutputsOutput, error) {
	plan, err := checkCollect(in)
	if err != nil {
		return nil, err
	}
	store, err := artifactStoreFor(c.d.Config, c.ws)
	if err != nil {
		return nil, err
	}

	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	r := newPathResolver(c, lease.Sandbox.Workdir, lease.Client)
	out := &collectOutputsOutput{Artifacts: []artifactOut{}}
	files, unmatched, cut, err := matchGlobs(ctx, c, r, plan.globs, plan.maxFiles)
	if err != nil {
		return nil, err
	}
	out.Matched, out.Unmatched = len(files), unmatched
	plan.matchedAtLeast = cut
	if len(files) == 0 {
		return out, nil
	}

	root, err := store.openForWrite()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if err := collectAll(ctx, c, lease.Client, root, plan, files, out); err != nil {
		return nil, err
	}
	return out, nil
}

// matchGlobs lists the regular files the globs match, each once, in path
// order (comparePathOrder), and the globs that matched none. Each glob
// contributes its first limit+1 matches at most (enough for the caps to say
// more matched); cut reports that a glob had more, so the list is then a
// prefix of the matches.
func matchGlobs(ctx context.Context, c *Call, r *pathResolver, globs []*globPattern, limit int) (files []collectFile, unmatched []string, cut bool, err error) {
	seen := map[string]bool{}
	for i, g := range globs {
		found, err := matchGlob(ctx, c, r, fmt.Sprintf("globs[%d]", i), g, limit+1, &cut)
		if err != nil {
			return nil, nil, false, err
		}
		if len(found) == 0 {
			unmatched = append(unmatched, g.raw)
		}
		for _, f := range found {
			if !seen[f.rel] {
				seen[f.rel] = true
				files = append(files, f)
			}
		}
	}
	slices.SortFunc(files, func(a, b collectFile) int { return comparePathOrder(a.rel, b.rel) })
	if len(files) > limit+1 {
		// Past the first limit+1 in path order nothing can be collected.
		files, cut = files[:limit+1], true
	}
	return files, unmatched, cut, nil
}

// collectAll stores files in the store's root, in order, into out, until
// plan's caps stop it (which out.LimitsHit and a notice say).
func collectAll(ctx context.Context, c *Call, cli *envdclient.Client, root *os.Root, plan *collectPlan, files []collectFile, out *collectOutputsOutput) error {
	maxFiles, maxBytes := plan.maxFiles, plan.maxBytes
	inlineLeft := c.d.Config.MaxReadBytes
	var total int64
	report := progressReporter(ctx, c, min(len(files), maxFiles), "collected")
	for _, f := range files {
		if len(out.Artifacts) >= maxFiles {
			out.LimitsHit = append(out.LimitsHit, "max_files")
			c.Notice("collect_outputs stopped at max_files (%d): %s files matched; raise max_files or narrow the globs, and collect the rest with another call.", maxFiles, matchedCount(len(files), plan.matchedAtLeast))
			return nil
		}
		if total+f.size > maxBytes {
			out.LimitsHit = append(out.LimitsHit, "max_bytes")
			c.Notice("collect_outputs stopped at max_bytes (%d bytes) before %s (%d bytes): %d of %s matching files were collected; raise max_bytes or narrow the globs.",
				maxBytes, f.rel, f.size, len(out.Artifacts), matchedCount(len(files), plan.matchedAtLeast))
			return nil
		}
		name := f.rel
		if plan.prefix != "" {
			name = plan.prefix + "/" + f.rel
		}
		a, err := collectOne(ctx, c, cli, root, f, name, maxBytes-total, plan.inline, &inlineLeft)
		if err != nil {
			if len(out.Artifacts) > 0 && !isLost(err) {
				err = connect.NewError(connect.CodeOf(err), fmt.Errorf("%s (the %d artifact(s) before it were stored)", rootCause(err), len(out.Artifacts)))
			}
			return err
		}
		if a == nil { // it grew past max_bytes while being collected
			out.LimitsHit = append(out.LimitsHit, "max_bytes")
			c.Notice("collect_outputs stopped at max_bytes (%d bytes): %s grew past it while being collected.", maxBytes, f.rel)
			return nil
		}
		total += a.Bytes
		out.Artifacts = append(out.Artifacts, *a)
		report(len(out.Artifacts))
	}
	return nil
}

// matchGlob lists the files matching g, at most limit of them, in path
// order (comparePathOrder); it sets *cut when more matched. A literal
// pattern is one Stat; a pattern with wildcards walks its literal base
// directory to the depth the pattern needs, and stops at the first match
// past limit, so what it holds stays within limit.
func matchGlob(ctx context.Context, c *Call, r *pathResolver, field string, g *globPattern, limit int, cut *bool) ([]collectFile, error) {
	if lit, ok := g.literal(); ok {
		res, err := r.resolve(ctx, field, lit)
		if err != nil {
			return nil, err
		}
		// The name itself (a symlink is not a regular file to collect).
		e, exists, err := r.stat(ctx, res.abs)
		if err != nil {
			return nil, c.Check(err)
		}
		if !exists || e.Type != envdclient.TypeFile {
			return nil, nil
		}
		return []collectFile{{abs: res.abs, rel: r.rel(res.abs), size: e.Size, mode: fs.FileMode(e.Mode)}}, nil
	}
	base, depth := g.base()
	if depth < 0 {
		depth = maxCollectDepth
	}
	abs := r.root
	if base != "" {
		res, err := r.resolve(ctx, field, base)
		if err != nil {
			return nil, err
		}
		if !res.exists || res.entry.Type != envdclient.TypeDir {
			return nil, nil // no such directory: nothing matches
		}
		abs = res.abs
	}
	var out []collectFile
	err := r.cli.WalkDir(ctx, abs, uint32(depth), func(e envdclient.Entry) error {
		rel := r.rel(e.Path)
		if e.Type != envdclient.TypeFile || (underToolData(rel) && !g.namesToolData()) || !g.match(rel) {
			return nil
		}
		if len(out) >= limit {
			*cut = true
			return envdclient.ErrStopWalk
		}
		out = append(out, collectFile{abs: e.Path, rel: rel, size: e.Size, mode: fs.FileMode(e.Mode)})
		return nil
	})
	if envdclient.IsNotFound(err) || connect.CodeOf(err) == connect.CodeInvalidArgument {
		return nil, nil // no such directory (or not a directory): nothing matches
	}
	if err != nil {
		return nil, c.Check(err)
	}
	return out, nil
}

// comparePathOrder orders workspace-relative paths as a listing does: by
// their names, directory by directory (so a directory's contents come right
// after it).
func comparePathOrder(a, b string) int {
	for {
		an, arest, amore := strings.Cut(a, "/")
		bn, brest, bmore := strings.Cut(b, "/")
		if c := strings.Compare(an, bn); c != 0 {
			return c
		}
		switch {
		case !amore && !bmore:
			return 0
		case !amore:
			return -1
		case !bmore:
			return 1
		}
		a, b = arest, brest
	}
}

// collectOne downloads f into the store as name. It returns nil, nil when
// the file holds more than room bytes (it grew since it was listed); an
// artifact of that name is then left as it was.
func collectOne(ctx context.Context, c *Call, cli *envdclient.Client, root *os.Root, f collectFile, name string, room int64, inline bool, inlineLeft *int64) (*artifactOut, error) {
	dl, err := cli.Download(ctx, f.abs)
	if err != nil {
		return nil, c.Check(err)
	}
	defer dl.Close()
	var peek *boundedBuffer
	if inline && f.size <= *inlineLeft {
		peek = &boundedBuffer{limit: *inlineLeft}
	}
	var w io.Writer
	if peek != nil {
		w = peek
	}
	n, sum, err := writeArtifact(root, name, dl, f.mode, w, room)
	if errors.Is(err, errArtifactTooBig) {
		return nil, nil
	}
	if err != nil {
		// A read error may be the sandbox going away mid-download.
		if cerr := c.Check(err); isLost(cerr) {
			return nil, cerr
		}
		return nil, err
	}
	a := &artifactOut{Name: name, Ref: schemeArtifact + name, Path: f.rel, Bytes: n, SHA256: sum}
	if inline {
		switch {
		case peek == nil || peek.over:
			a.ContentOmitted = fmt.Sprintf("larger than what is left of the inline budget (%d of %d bytes); read it with read_files", *inlineLeft, c.d.Config.MaxReadBytes)
		case !utf8.Valid(peek.buf.Bytes()) || bytes.IndexByte(peek.buf.Bytes(), 0) >= 0:
			a.ContentOmitted = binaryOmitted(peek.buf.Bytes())
		default:
			a.Content = peek.buf.String()
			*inlineLeft -= n
		}
	}
	return a, nil
}

// binaryOmitted says why a binary file is not inline and what the model can
// do with it instead: look at an image with read_files (which shows it as
// an image), or inspect other data with a command.
func binaryOmitted(head []byte) string {
	if mime := imageType(head); mime != "" {
		return "an image (" + mime + "), not text; read_files on its path shows it to you as an image"
	}
	return "binary data, not text; inspect it in the sandbox with a command (file, xxd, a script), or read exact bytes with read_files encoding base64"
}

// matchedCount says how many files matched: n, or "at least n" when the
// listing stopped early.
func matchedCount(n int, atLeast bool) string {
	if atLeast {
		return fmt.Sprintf("at least %d", n)
	}
	return strconv.Itoa(n)
}

// boundedBuffer keeps what is written up to limit bytes and notes overflow.
type boundedBuffer struct {
	buf   bytes.Buffer
	limit int64
	over  bool
}

// Write keeps p while the buffer stays within its limit; it never fails.
func (b *boundedBuffer) Write(p []byte) (int, error) {
	if !b.over {
		if int64(b.buf.Len()+len(p)) > b.limit {
			b.over = true
			b.buf.Reset()
		} else {
			b.buf.Write(p)
		}
	}
	return len(p), nil
}

package tools

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"connectrpc.com/connect"
	"github.com/invopop/jsonschema"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// The bounds of one edit_file call.
const (
	// maxEditBytes is the largest file edit_file edits (before and after).
	maxEditBytes = 10 << 20
	// maxEdits bounds the edits of one call.
	maxEdits = 100
	// editContextLines is the number of lines shown around each change.
	editContextLines = 3
	// maxSnippetLines bounds the lines of all snippets of one result.
	maxSnippetLines = 200
	// maxShownLineBytes cuts long lines in snippets and error messages.
	maxShownLineBytes = 300
	// maxListedLines bounds the line numbers an ambiguity error lists.
	maxListedLines = 20
)

type editFileInput struct {
	Path  string     `json:"path" jsonschema:"required,minLength=1" jsonschema_description:"Workspace-relative path of an existing text file. To create a file, use put_files."`
	Edits []fileEdit `json:"edits" jsonschema:"required,minItems=1" jsonschema_description:"The replacements, applied in order, each to the result of the ones before it. All-or-nothing: if one does not apply, the file is not changed."`
}

// JSONSchemaExtend publishes the limits runEditFile relies on.
func (editFileInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "edits").MaxItems = schemaCount(maxEdits)
}

type fileEdit struct {
	OldText    string `json:"old_text" jsonschema:"required" jsonschema_description:"The exact text to replace, whitespace and indentation included; it must occur exactly once in the file (include a few surrounding lines to make it unique) unless replace_all is set. Not empty."`
	NewText    string `json:"new_text" jsonschema:"required" jsonschema_description:"The text to put in its place (empty deletes old_text)."`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"default=false" jsonschema_description:"Replace every occurrence of old_text instead of requiring exactly one (default false)."`
}

type editFileOutput struct {
	Meta
	Path         string       `json:"path" jsonschema_description:"Workspace-relative path of the file edited."`
	Replacements int          `json:"replacements" jsonschema_description:"Occurrences replaced, all edits together."`
	Edits        []editResult `json:"edits" jsonschema_description:"One entry per edit, in the order given."`
	BytesBefore  int64        `json:"bytes_before" jsonschema_description:"Size of the file before the call."`
	Bytes        int64        `json:"bytes" jsonschema_description:"Size of the file after the call."`
	LinesBefore  int          `json:"lines_before" jsonschema_description:"Lines in the file before the call."`
	Lines        int          `json:"lines" jsonschema_description:"Lines in the file after the call."`
	Mode         string       `json:"mode,omitempty" jsonschema_description:"The file's permission mode, kept from before, in octal."`
	Snippets     []editSnip   `json:"snippets" jsonschema_description:"The changed regions of the file after the call, each with a few lines of context around it."`
	SnippetsCut  bool         `json:"snippets_cut,omitempty" jsonschema_description:"True when not every changed region is shown (there were too many); read the file for the rest."`
}

type editResult struct {
	Replacements int   `json:"replacements" jsonschema_description:"Occurrences this edit replaced."`
	Lines        []int `json:"lines" jsonschema_description:"Line numbers (1-based, in the file after the call) where this edit's replacements start (at most 20)."`
}

type editSnip struct {
	StartLine int    `json:"start_line" jsonschema_description:"Line number of the snippet's first line."`
	Text      string `json:"text" jsonschema_description:"The lines, each as it is in the file (long lines cut)."`
}

// EditFile is the edit_file tool: exact search/replace edits to one
// workspace file, all-or-nothing, written atomically (a temporary beside the
// file, renamed over it) through envd's generic file API, so it works on
// every provider.
func EditFile(d *Deps) Tool {
	return define(d, spec[editFileInput, editFileOutput]{
		name:  "edit_file",
		title: "Edit a file",
		description: fmt.Sprintf("Edit an existing text file in the workspace by exact search and replace: each edit replaces old_text, which must occur exactly once "+
			"(or every occurrence with replace_all), by new_text. Several edits are applied in order, all-or-nothing, and the file is replaced atomically, keeping its mode. "+
			"The result shows each changed region with line numbers. old_text must match the file exactly, indentation included; when it does not, the error shows the closest lines. "+
			"Use read_files first to see the exact text; use put_files to create a file or rewrite it whole. Files up to %d bytes.", maxEditBytes),
		toolset:     ToolsetFiles,
		annotations: Annotations{ReadOnly: false, Destructive: true, Idempotent: false, OpenWorld: false},
		run:         runEditFile,
	})
}

func runEditFile(ctx context.Context, c *Call, in *editFileInput) (*editFileOutput, error) {
	for i, e := range in.Edits {
		field := fmt.Sprintf("edits[%d]", i)
		if e.OldText == "" {
			return nil, inputErr(field+".old_text", "is empty; give the exact text to replace (to add text, include a neighbouring line in old_text and repeat it in new_text; to create a file, use put_files)")
		}
		if e.OldText == e.NewText {
			return nil, inputErr(field, "old_text and new_text are the same, so the edit would change nothing")
		}
	}
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	r := newPathResolver(c, lease.Sandbox.Workdir, lease.Client)
	dest, shown, err := resolveFileDest(ctx, r, "path", in.Path)
	if err != nil {
		return nil, err
	}
	before, exists, err := r.stat(ctx, dest)
	if err != nil {
		return nil, c.Check(err)
	}
	switch {
	case !exists:
		return nil, inputErr("path", "%s does not exist; edit_file changes existing files (create it with put_files)", shown)
	case before.Type == envdclient.TypeDir:
		return nil, inputErr("path", "%s is a directory; give the path of a file", shown)
	case before.Type != envdclient.TypeFile:
		return nil, inputErr("path", "%s is not a regular file (%s)", shown, before.Permissions)
	case before.Size > maxEditBytes:
		return nil, inputErr("path", "%s has %d bytes, more than edit_file's limit of %d; change it with a command in workspace_exec (for example sed), or rewrite it with put_files", shown, before.Size, maxEditBytes)
	}
	data, err := downloadCapped(ctx, lease.Client, dest, maxEditBytes)
	if err != nil {
		if envdclient.IsNotFound(err) {
			return nil, inputErr("path", "%s was removed while it was being read", shown)
		}
		if err == errTooLarge {
			return nil, inputErr("path", "%s grew past edit_file's limit of %d bytes while it was being read", shown, maxEditBytes)
		}
		return nil, c.Check(err)
	}
	if editReadHook != nil {
		editReadHook(dest)
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return nil, inputErr("path", "%s is a binary file (it contains NUL bytes); edit_file edits text files only (replace a binary file with put_files, encoding base64)", shown)
	}
	content := string(data)
	ed := &editor{content: content}
	for i, e := range in.Edits {
		if err := ed.apply(fmt.Sprintf("edits[%d]", i), e); err != nil {
			return nil, err
		}
	}
	if int64(len(ed.content)) > maxEditBytes {
		return nil, inputErr("edits", "the edited file would have %d bytes, more than edit_file's limit of %d", len(ed.content), maxEditBytes)
	}
	if ed.content == content {
		return nil, inputErr("edits", "the edits together leave %s unchanged; nothing was written", shown)
	}
	newData := []byte(ed.content)
	item := uploadItem{
		dest: dest, shown: shown, field: "path",
		open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(newData)), nil },
	}
	batch := &uploadBatch{c: c, r: r, items: []uploadItem{item}}
	batch.beforeMove = func(ctx context.Context) error {
		// The file must still be what was read: another writer's change in
		// the meantime would otherwise be lost without a word.
		now, err := lease.Client.Stat(ctx, dest)
		if err != nil {
			if envdclient.IsNotFound(err) {
				return inputErr("path", "%s was removed while it was being edited; nothing was written", shown)
			}
			if connect.CodeOf(err) == connect.CodePermissionDenied {
				// A confining envd refuses a link that now leads outside.
				return inputErr("path", "%s changed while it was being edited (it now resolves outside the workspace); nothing was written", shown)
			}
			return c.Check(err)
		}
		if now.Size != before.Size || !now.ModTime.Equal(before.ModTime) || now.Type != envdclient.TypeFile {
			return inputErr("path", "%s changed while it was being edited (its size or modification time differs from when it was read); nothing was written: read it again and retry", shown)
		}
		return nil
	}
	results, err := batch.run(ctx)
	if err != nil {
		return nil, err
	}
	out := &editFileOutput{
		Path: shown, Replacements: ed.total, Edits: ed.results,
		BytesBefore: int64(len(content)), Bytes: int64(len(newData)),
		LinesBefore: editorLines(content), Lines: editorLines(ed.content),
		Mode: octalMode(results[0].mode),
	}
	out.Snippets, out.SnippetsCut = ed.snippets()
	return out, nil
}

// editReadHook, when set (by tests only), runs after edit_file read the
// file at dest and before it writes, to stage a concurrent change.
var editReadHook func(dest string)

// errTooLarge is a download longer than its cap.
var errTooLarge = connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the file is too large"))

// downloadCapped returns the whole file abs, failing with errTooLarge past
// limit bytes.
func downloadCapped(ctx context.Context, cli *envdclient.Client, abs string, limit int64) ([]byte, error) {
	dl, err := cli.DownloadRange(ctx, abs, 0, -1)
	if err != nil {
		return nil, err
	}
	defer dl.Close()
	var buf bytes.Buffer
	if dl.Size > 0 && dl.Size <= limit {
		buf.Grow(int(dl.Size))
	}
	n, err := io.Copy(&buf, io.LimitReader(dl, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, errTooLarge
	}
	return buf.Bytes(), nil
}

// editorLines counts lines as an editor shows them: a last line without a
// newline counts, an empty file has none.
func editorLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// span is a changed byte range [start, end) of the current content.
type span struct{ start, end int }

// editor applies edits to content, tracking where the changes are.
type editor struct {
	content string
	spans   []span
	results []editResult
	total   int
}

// apply performs one edit or explains why it cannot.
func (ed *editor) apply(field string, e fileEdit) error {
	old, repl := e.OldText, e.NewText
	count := strings.Count(ed.content, old)
	if count == 0 && strings.Contains(ed.content, "\r\n") && strings.Contains(old, "\n") && !strings.Contains(old, "\r\n") {
		// The file has CRLF line ends and the model wrote LF: match them.
		crlf := strings.ReplaceAll(old, "\n", "\r\n")
		if n := strings.Count(ed.content, crlf); n > 0 {
			old, count = crlf, n
			repl = strings.ReplaceAll(strings.ReplaceAll(repl, "\r\n", "\n"), "\n", "\r\n")
		}
	}
	switch {
	case count == 0:
		return inputErr(field+".old_text", "%s", notFoundText(ed.content, old))
	case count > 1 && !e.ReplaceAll:
		return inputErr(field+".old_text", "occurs %d times (at lines %s); include more surrounding lines to make it unique, or set replace_all to replace every occurrence", count, lineList(ed.content, old))
	}
	// Find the occurrences, build the new content, and move the spans of
	// earlier edits along.
	var b strings.Builder
	b.Grow(len(ed.content) + count*(len(repl)-len(old)))
	var fresh []span
	var starts []int
	last := 0
	type cut struct{ at, delta int }
	var cuts []cut
	for {
		i := strings.Index(ed.content[last:], old)
		if i < 0 {
			break
		}
		at := last + i
		b.WriteString(ed.content[last:at])
		ns := b.Len()
		b.WriteString(repl)
		fresh = append(fresh, span{ns, b.Len()})
		starts = append(starts, ns)
		cuts = append(cuts, cut{at + len(old), len(repl) - len(old)})
		last = at + len(old)
	}
	b.WriteString(ed.content[last:])
	// shift maps an offset of the old content to the new one.
	shift := func(p int) int {
		d := 0
		for _, c := range cuts {
			if c.at <= p {
				d += c.delta
			}
		}
		return p + d
	}
	var spans []span
	for _, s := range ed.spans {
		ns, ne := shift(s.start), shift(s.end)
		if ne < ns {
			ne = ns
		}
		spans = append(spans, span{ns, ne})
	}
	newContent := b.String()
	res := editResult{Replacements: count, Lines: []int{}}
	for _, st := range starts {
		if len(res.Lines) == maxListedLines {
			break
		}
		res.Lines = append(res.Lines, strings.Count(newContent[:st], "\n")+1)
	}
	ed.content = newContent
	ed.spans = append(spans, fresh...)
	ed.results = append(ed.results, res)
	ed.total += count
	return nil
}

// snippets renders the changed regions with context, merged where they
// touch, within maxSnippetLines lines.
func (ed *editor) snippets() ([]editSnip, bool) {
	lines := strings.SplitAfter(ed.content, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	starts := make([]int, len(lines)) // byte offset of each line
	off := 0
	for i, l := range lines {
		starts[i] = off
		off += len(l)
	}
	lineOf := func(p int) int { // 0-based line holding byte p
		i := sort.Search(len(starts), func(i int) bool { return starts[i] > p })
		return max(i-1, 0)
	}
	type window struct{ from, to int } // 0-based, inclusive
	var wins []window
	sorted := append([]span(nil), ed.spans...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].start < sorted[j].start })
	for _, s := range sorted {
		from := lineOf(s.start)
		to := lineOf(max(s.end-1, s.start))
		w := window{max(from-editContextLines, 0), min(to+editContextLines, len(lines)-1)}
		if n := len(wins); n > 0 && w.from <= wins[n-1].to+1 {
			wins[n-1].to = max(wins[n-1].to, w.to)
			continue
		}
		wins = append(wins, w)
	}
	var out []editSnip
	budget := maxSnippetLines
	cut := false
	for _, w := range wins {
		if budget <= 0 || w.to < w.from {
			cut = cut || budget <= 0
			continue
		}
		to := min(w.to, w.from+budget-1)
		if to < w.to {
			cut = true
		}
		var b strings.Builder
		for i := w.from; i <= to; i++ {
			b.WriteString(shortLine(strings.TrimRight(lines[i], "\r\n")))
			b.WriteByte('\n')
		}
		budget -= to - w.from + 1
		out = append(out, editSnip{StartLine: w.from + 1, Text: b.String()})
	}
	if out == nil {
		out = []editSnip{}
	}
	return out, cut
}

// shortLine cuts a line to maxShownLineBytes for display.
func shortLine(l string) string {
	if len(l) <= maxShownLineBytes {
		return l
	}
	return strings.ToValidUTF8(l[:maxShownLineBytes], "") + "…"
}

// lineList lists the line numbers where old occurs in content.
func lineList(content, old string) string {
	var nums []string
	line, last := 1, 0
	for len(nums) < maxListedLines {
		i := strings.Index(content[last:], old)
		if i < 0 {
			break
		}
		line += strings.Count(content[last:last+i], "\n")
		nums = append(nums, fmt.Sprint(line))
		line += strings.Count(old, "\n")
		last += i + len(old)
	}
	s := strings.Join(nums, ", ")
	if strings.Count(content, old) > len(nums) {
		s += ", …"
	}
	return s
}

// ModelText renders the edit: a status line with the counts, then each
// changed region of the file after it, numbered like `cat -n`.
func (o *editFileOutput) ModelText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Edited %s: %d replacement(s) from %d edit(s); %d → %d lines, %d → %d bytes.",
		o.Path, o.Replacements, len(o.Edits), o.LinesBefore, o.Lines, o.BytesBefore, o.Bytes)
	for _, s := range o.Snippets {
		lines := strings.Split(strings.TrimSuffix(s.Text, "\n"), "\n")
		fmt.Fprintf(&b, "\n\nLines %d-%d after the edit:", s.StartLine, s.StartLine+len(lines)-1)
		for i, l := range lines {
			fmt.Fprintf(&b, "\n%6d\t%s", s.StartLine+i, l)
		}
	}
	if o.SnippetsCut {
		b.WriteString("\n\n(more changes than shown; read the file to see them all)")
	}
	return b.String()
}

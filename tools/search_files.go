package tools

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/invopop/jsonschema"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/search"
)

// The bounds of one search_files call.
const (
	defaultSearchResults = 100
	maxSearchResults     = 1000
	maxSearchContext     = 10
	maxSearchGlobs       = 20
	// searchBytes bounds the line text one search returns, context included.
	searchBytes = 64 << 10
	// searchMaxFiles bounds the files one search scans.
	searchMaxFiles = 200_000
	// searchTimeout bounds the time one search takes in the sandbox.
	searchTimeout = 20 * time.Second
)

type searchFilesInput struct {
	Pattern         string   `json:"pattern" jsonschema:"required,minLength=1" jsonschema_description:"Regular expression (Go RE2 syntax: no backreferences or lookaround) matched against each line; or a plain string when literal is true."`
	Path            string   `json:"path,omitempty" jsonschema_description:"Workspace-relative directory to search (default: the workspace root)."`
	Glob            []string `json:"glob,omitempty" jsonschema_description:"Search only files matching one of these globs: without / a glob matches the file name (*.py), with / the workspace-relative path (src/**/*.ts)."`
	Exclude         []string `json:"exclude,omitempty" jsonschema_description:"Skip files and directories matching one of these globs (same rules as glob), for example node_modules or *.min.js."`
	CaseInsensitive bool     `json:"case_insensitive,omitempty" jsonschema:"default=false" jsonschema_description:"Match regardless of case (default false)."`
	Literal         bool     `json:"literal,omitempty" jsonschema:"default=false" jsonschema_description:"Treat pattern as a plain string, not a regular expression (default false)."`
	ContextLines    int      `json:"context_lines,omitempty" jsonschema:"minimum=0,default=0" jsonschema_description:"Lines of context to show before and after each match (default 0, at most 10)."`
	MaxResults      int      `json:"max_results,omitempty" jsonschema:"minimum=1,default=100" jsonschema_description:"Most matching lines to return (default 100, at most 1000)."`
}

// JSONSchemaExtend publishes the limits runSearchFiles relies on.
func (searchFilesInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "context_lines").Maximum = schemaInt(maxSearchContext)
	schemaProp(s, "max_results").Maximum = schemaInt(maxSearchResults)
	schemaProp(s, "glob").MaxItems = schemaCount(maxSearchGlobs)
	schemaProp(s, "exclude").MaxItems = schemaCount(maxSearchGlobs)
}

type searchFilesOutput struct {
	Meta
	Matches       []searchMatch `json:"matches" jsonschema_description:"The matching lines, file by file."`
	MatchCount    int64         `json:"match_count" jsonschema_description:"Matching lines returned."`
	FilesMatched  int64         `json:"files_matched" jsonschema_description:"Files with at least one match returned."`
	FilesScanned  int64         `json:"files_scanned" jsonschema_description:"Text files searched."`
	BinarySkipped int64         `json:"binary_skipped" jsonschema_description:"Files skipped as binary (a NUL byte near their start)."`
	Unreadable    int64         `json:"unreadable" jsonschema_description:"Files or directories that could not be read."`
	Truncated     bool          `json:"truncated" jsonschema_description:"True when a bound stopped the search early: more matches may exist."`
	StoppedBy     string        `json:"stopped_by,omitempty" jsonschema:"enum=max_results,enum=max_bytes,enum=max_files,enum=timeout" jsonschema_description:"Which bound stopped the search, when truncated."`
	ElapsedMS     int64         `json:"elapsed_ms" jsonschema_description:"Time the search took in the sandbox, in milliseconds."`
}

type searchMatch struct {
	Path   string   `json:"path" jsonschema_description:"Workspace-relative path of the file."`
	Line   int64    `json:"line" jsonschema_description:"Line number (1-based)."`
	Text   string   `json:"text" jsonschema_description:"The line (a part around the match when the line is long)."`
	Cut    bool     `json:"cut,omitempty" jsonschema_description:"True when text is only part of a long line."`
	Before []string `json:"before,omitempty" jsonschema_description:"The context lines before it, oldest first."`
	After  []string `json:"after,omitempty" jsonschema_description:"The context lines after it."`
}

// SearchFiles is the search_files tool: a regex search of workspace files,
// run inside the sandbox by the lean envd's search mode (package
// envd/search), bounded in matches, bytes, files and time.
func SearchFiles(d *Deps) Tool {
	return define(d, spec[searchFilesInput, searchFilesOutput]{
		name:  "search_files",
		title: "Search files",
		description: fmt.Sprintf("Search the contents of workspace files for a regular expression (Go RE2 syntax) or, with literal, a plain string; returns matching lines with path and line number, optionally with context lines. "+
			"Filter files with glob and exclude; binary files and the .git and .sandbox-mcp directories are skipped, symlinks are not followed. "+
			"Bounded: at most max_results lines (default %d), %d bytes of text, %d files and %d seconds; a result cut short says so (truncated, stopped_by). "+
			"To list files by name, use list_files.", defaultSearchResults, searchBytes, searchMaxFiles, int(searchTimeout.Seconds())),
		toolset:     ToolsetFiles,
		annotations: Annotations{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false},
		run:         runSearchFiles,
	})
}

func runSearchFiles(ctx context.Context, c *Call, in *searchFilesInput) (*searchFilesOutput, error) {
	if err := checkPattern(in.Pattern, in.Literal); err != nil {
		return nil, err
	}
	for i, g := range in.Glob {
		if _, err := compileGlob(fmt.Sprintf("glob[%d]", i), g); err != nil {
			return nil, err
		}
	}
	for i, g := range in.Exclude {
		if _, err := compileGlob(fmt.Sprintf("exclude[%d]", i), g); err != nil {
			return nil, err
		}
	}
	maxResults := in.MaxResults
	if maxResults == 0 {
		maxResults = defaultSearchResults
	}
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	r := newPathResolver(c, lease.Sandbox.Workdir, lease.Client)
	res, err := r.resolve(ctx, "path", in.Path)
	if err != nil {
		return nil, err
	}
	shown := r.rel(res.abs)
	switch {
	case !res.exists:
		return nil, inputErr("path", "%s does not exist in the workspace", shown)
	case res.entry.Type != envdclient.TypeDir:
		return nil, inputErr("path", "%s is not a directory; give a directory to search (narrow to one file with glob)", shown)
	}
	args := []string{"envd", search.Command, "--root", r.root, "--dir", relPath(r.root, res.real), "--pattern", in.Pattern,
		"--context", strconv.Itoa(in.ContextLines), "--max-matches", strconv.Itoa(maxResults),
		"--max-bytes", strconv.Itoa(searchBytes), "--max-files", strconv.Itoa(searchMaxFiles), "--timeout", searchTimeout.String()}
	if in.Literal {
		args = append(args, "--literal")
	}
	if in.CaseInsensitive {
		args = append(args, "--ignore-case")
	}
	for _, g := range in.Glob {
		args = append(args, "--include", g)
	}
	for _, g := range in.Exclude {
		args = append(args, "--exclude", g)
	}
	rs, err := runSearchHelper(ctx, c, lease, args)
	if err != nil {
		return nil, err
	}
	out := &searchFilesOutput{Matches: rs.matches}
	if out.Matches == nil {
		out.Matches = []searchMatch{}
	}
	if s := rs.summary; s != nil {
		out.MatchCount, out.FilesMatched, out.FilesScanned = s.Matches, s.FilesMatched, s.FilesScanned
		out.BinarySkipped, out.Unreadable, out.Truncated, out.ElapsedMS = s.BinarySkipped, s.Errors, s.Truncated, s.ElapsedMS
		out.StoppedBy = s.Reason
		if out.StoppedBy == "max_matches" {
			out.StoppedBy = "max_results"
		}
	}
	switch out.StoppedBy {
	case "timeout", "max_files":
		c.Notice("The search stopped early (%s) after scanning %d files: the matches shown are partial. Narrow it with path, glob or exclude.", stoppedText(out.StoppedBy), out.FilesScanned)
	}
	return out, nil
}

func stoppedText(by string) string {
	switch by {
	case "timeout":
		return fmt.Sprintf("it reached the %d-second limit", int(searchTimeout.Seconds()))
	case "max_files":
		return fmt.Sprintf("it reached the limit of %d files", searchMaxFiles)
	case "max_bytes":
		return fmt.Sprintf("it reached the limit of %d bytes of text", searchBytes)
	}
	return "it reached max_results"
}

// checkPattern parses the pattern as the search will, turning a syntax
// error into one that names its byte position.
func checkPattern(pattern string, literal bool) error {
	if literal {
		return nil
	}
	if _, err := syntax.Parse(pattern, syntax.Perl); err != nil {
		var se *syntax.Error
		if errors.As(err, &se) {
			pos := strings.Index(pattern, se.Expr)
			if se.Code == syntax.ErrMissingParen {
				pos = unclosedParen(pattern)
			}
			where := ""
			if pos >= 0 {
				where = fmt.Sprintf(" at byte %d", pos)
			}
			return inputErr("pattern", "is not a valid regular expression: %s%s (near %q); Go RE2 syntax has no backreferences or lookaround; set literal to search for the text as it is", se.Code, where, se.Expr)
		}
		return inputErr("pattern", "is not a valid regular expression: %v", err)
	}
	if _, err := search.CompilePattern(pattern, false, false); err != nil {
		return inputErr("pattern", "is not a valid regular expression: %v", err)
	}
	return nil
}

// unclosedParen returns the byte offset of the last "(" of pattern that no
// ")" closes, skipping escapes and character classes, or -1.
func unclosedParen(pattern string) int {
	var open []int
	inClass := false
	for i := 0; i < len(pattern); i++ {
		switch ch := pattern[i]; {
		case ch == '\\':
			i++
		case inClass:
			inClass = ch != ']'
		case ch == '[':
			inClass = true
			if i+1 < len(pattern) && pattern[i+1] == ']' {
				i++
			}
		case ch == '(':
			open = append(open, i)
		case ch == ')' && len(open) > 0:
			open = open[:len(open)-1]
		}
	}
	if len(open) == 0 {
		return -1
	}
	return open[len(open)-1]
}

// ModelText renders the matches grep-style, file by file: "path" on its own
// line, then "LINE:text" for matches and "LINE-text" for context, "--"
// between groups that do not touch.
func (o *searchFilesOutput) ModelText() string {
	var b strings.Builder
	files := o.FilesMatched
	fmt.Fprintf(&b, "%d matching line(s) in %d file(s); %d file(s) searched", o.MatchCount, files, o.FilesScanned)
	if o.BinarySkipped > 0 {
		fmt.Fprintf(&b, ", %d binary skipped", o.BinarySkipped)
	}
	if o.Unreadable > 0 {
		fmt.Fprintf(&b, ", %d unreadable", o.Unreadable)
	}
	fmt.Fprintf(&b, " (%d ms).", o.ElapsedMS)
	if o.Truncated {
		fmt.Fprintf(&b, " Stopped early: %s; more matches may exist (narrow the search, or raise max_results).", stoppedText(o.StoppedBy))
	}
	b.WriteByte('\n')
	type shownLine struct {
		text  string
		match bool
	}
	for start := 0; start < len(o.Matches); {
		p := o.Matches[start].Path
		end := start
		lines := map[int64]shownLine{}
		for ; end < len(o.Matches) && o.Matches[end].Path == p; end++ {
			m := o.Matches[end]
			for i, t := range m.Before {
				if n := m.Line - int64(len(m.Before)-i); !lines[n].match {
					lines[n] = shownLine{text: t}
				}
			}
			text := m.Text
			if m.Cut {
				text += " [line cut]"
			}
			lines[m.Line] = shownLine{text: text, match: true}
			for i, t := range m.After {
				if n := m.Line + 1 + int64(i); !lines[n].match {
					lines[n] = shownLine{text: t}
				}
			}
		}
		nums := slices.Sorted(maps.Keys(lines))
		if start > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p)
		b.WriteByte('\n')
		for i, n := range nums {
			if i > 0 && n > nums[i-1]+1 {
				b.WriteString("--\n")
			}
			sep := '-'
			if lines[n].match {
				sep = ':'
			}
			fmt.Fprintf(&b, "%d%c%s\n", n, sep, lines[n].text)
		}
		start = end
	}
	return strings.TrimSuffix(b.String(), "\n")
}

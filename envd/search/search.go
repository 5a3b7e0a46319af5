// Package search is the content search the lean envd runs inside a sandbox
// (`sandbox-envd search ...`): it walks a directory under a root, matches a
// Go RE2 regular expression line by line in every text file, and streams
// what it finds as JSON lines, within bounds on matches, bytes, files and
// time. It runs where the files are, so a search of a large tree costs one
// process start instead of a download per file.
//
// Nothing outside the root is read: the walk goes through os.Root handles
// (openat below the root, so a symlink swapped in mid-walk cannot lead
// out), symlinks are never followed, and only regular files are opened.
// Directories named .git or .sandbox-mcp are skipped, as are binary files
// (a NUL byte in their first 8 KiB).
package search

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// ProtocolVersion is the version of the JSON-lines protocol, sent in the
// first record; a caller that sees another (or none) knows the binary it ran
// is not the one it expects.
const ProtocolVersion = 1

// The defaults of Options' bounds.
const (
	DefaultMaxMatches   = 100
	DefaultMaxBytes     = 64 << 10
	DefaultMaxFiles     = 200_000
	DefaultTimeout      = 20 * time.Second
	DefaultMaxLineBytes = 300
)

// chunkBytes is the read size; maxChunkBytes bounds the buffer a line that
// does not fit grows it to (longer lines are matched in pieces).
const (
	chunkBytes    = 256 << 10
	maxChunkBytes = 4 << 20
	binarySniff   = 8 << 10
	dirBatch      = 1024
	maxContext    = 20
)

// Options is one search.
type Options struct {
	// Root is the absolute directory nothing outside of which is read.
	Root string
	// Dir is the directory to search, relative to Root ("" or "." for Root).
	Dir string
	// Pattern is a Go RE2 regular expression, or a literal string when
	// Literal is set.
	Pattern    string
	Literal    bool
	IgnoreCase bool
	// Include, when not empty, keeps only files matching one of its globs;
	// Exclude drops files and directories matching one of its globs. A glob
	// without "/" matches the base name; one with "/" matches the
	// Root-relative path ("**" spans directories).
	Include, Exclude []string
	// Context is the number of lines shown before and after each match
	// (at most 20).
	Context int
	// MaxMatches bounds the matching lines reported (default 100).
	MaxMatches int
	// MaxBytes bounds the line text reported, context included (default 64 KiB).
	MaxBytes int64
	// MaxFiles bounds the files scanned (default 200,000).
	MaxFiles int64
	// Timeout bounds the whole search (default 20 s).
	Timeout time.Duration
	// MaxLineBytes bounds each line's text (default 300); a longer line
	// is cut around the match.
	MaxLineBytes int
}

// Record is one JSON line of output.
type Record struct {
	// Type is "start" (first, with Version), "match", "error" (a file or
	// directory that could not be read) or "done" (last, with Summary).
	Type    string `json:"type"`
	Version int    `json:"version,omitempty"`
	Path    string `json:"path,omitempty"`
	Line    int64  `json:"line,omitempty"`
	Text    string `json:"text,omitempty"`
	// Cut says Text is part of a longer line.
	Cut     bool     `json:"cut,omitempty"`
	Before  []string `json:"before,omitempty"`
	After   []string `json:"after,omitempty"`
	Error   string   `json:"error,omitempty"`
	Summary *Summary `json:"summary,omitempty"`
}

// Summary ends the output.
type Summary struct {
	FilesScanned  int64 `json:"files_scanned"`
	FilesMatched  int64 `json:"files_matched"`
	Matches       int64 `json:"matches"`
	BinarySkipped int64 `json:"binary_skipped"`
	Errors        int64 `json:"errors"`
	// Truncated says a bound stopped the search; Reason names it:
	// "max_matches", "max_bytes", "max_files" or "timeout".
	Truncated bool   `json:"truncated"`
	Reason    string `json:"reason,omitempty"`
	ElapsedMS int64  `json:"elapsed_ms"`
}

// CompilePattern compiles a search pattern as Run does: multi-line mode
// (^ and $ at line ends), case folding when asked, quoted when literal.
func CompilePattern(pattern string, literal, ignoreCase bool) (*regexp.Regexp, error) {
	p := pattern
	if literal {
		p = regexp.QuoteMeta(p)
	}
	flags := "(?m)"
	if ignoreCase {
		flags = "(?mi)"
	}
	return regexp.Compile(flags + p)
}

// errStop ends the walk once a bound is reached.
var errStop = errors.New("search: bound reached")

type searcher struct {
	opts    Options
	re      *regexp.Regexp
	lit     []byte // the pattern when it is a case-sensitive literal
	include []glob
	exclude []glob
	out     *bufio.Writer
	enc     *json.Encoder
	sum     Summary
	bytes   int64
	ctx     context.Context
	buf     []byte
	skipTop bool // Root is "/": leave /proc, /sys and /dev alone

	// per file
	rel       string
	matched   bool
	lineNo    int64    // line number of the first byte of the chunk
	tail      []string // the last Context lines before the chunk
	pending   *Record  // a match still collecting after-context
	afterNeed int      // lines of after-context still wanted
	afterFrom int      // where in the chunk the next after-context line starts
	// startsMid and endsMid say the chunk begins or ends inside a line
	// longer than maxChunkBytes, which is matched piece by piece (a match
	// that spans two pieces is not seen).
	startsMid, endsMid bool
}

// Run searches as opts says, writing records to w. It returns an error only
// when the search could not start (bad options, a root that cannot be
// opened) or w failed; what happens to single files is reported in error
// records.
func Run(ctx context.Context, opts Options, w io.Writer) error {
	if opts.MaxMatches <= 0 {
		opts.MaxMatches = DefaultMaxMatches
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = DefaultMaxFiles
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	opts.Context = min(max(opts.Context, 0), maxContext)
	if opts.Pattern == "" {
		return errors.New("search: the pattern is empty")
	}
	re, err := CompilePattern(opts.Pattern, opts.Literal, opts.IgnoreCase)
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	s := &searcher{opts: opts, re: re, out: bufio.NewWriterSize(w, 64<<10), buf: make([]byte, chunkBytes)}
	if opts.Literal && !opts.IgnoreCase {
		s.lit = []byte(opts.Pattern)
	}
	for _, g := range opts.Include {
		s.include = append(s.include, compileGlob(g))
	}
	for _, g := range opts.Exclude {
		s.exclude = append(s.exclude, compileGlob(g))
	}
	s.enc = json.NewEncoder(s.out)
	s.enc.SetEscapeHTML(false)
	if !path.IsAbs(opts.Root) {
		return fmt.Errorf("search: root %q is not absolute", opts.Root)
	}
	s.skipTop = path.Clean(opts.Root) == "/"
	dir := path.Clean("/" + opts.Dir)[1:] // "" for the root; never above it
	var cancel context.CancelFunc
	s.ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	started := time.Now()

	root, err := os.OpenRoot(opts.Root)
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	defer root.Close()
	start := root
	if dir != "" {
		if start, err = root.OpenRoot(dir); err != nil {
			return fmt.Errorf("search: %s: %w", dir, unwrapPath(err))
		}
		defer start.Close()
	}
	if err := s.emit(&Record{Type: "start", Version: ProtocolVersion}); err != nil {
		return err
	}
	err = s.walk(start, dir)
	if err != nil && !errors.Is(err, errStop) {
		return err
	}
	s.sum.ElapsedMS = time.Since(started).Milliseconds()
	if err := s.emit(&Record{Type: "done", Summary: &s.sum}); err != nil {
		return err
	}
	return s.out.Flush()
}

func (s *searcher) emit(r *Record) error { return s.enc.Encode(r) }

// stop records why the search ends early.
func (s *searcher) stop(reason string) error {
	if !s.sum.Truncated {
		s.sum.Truncated, s.sum.Reason = true, reason
	}
	return errStop
}

// check reports a bound that ends the search before the next file.
func (s *searcher) check() error {
	if s.ctx.Err() != nil {
		return s.stop("timeout")
	}
	if s.sum.FilesScanned >= s.opts.MaxFiles {
		return s.stop("max_files")
	}
	return nil
}

func (s *searcher) fail(rel string, err error) error {
	s.sum.Errors++
	return s.emit(&Record{Type: "error", Path: rel, Error: unwrapPath(err).Error()})
}

// unwrapPath drops the absolute path an *fs.PathError carries.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// walk searches the directory dir (open as d), whose Root-relative path is
// rel, depth first. Entries are read in batches, so memory stays bounded
// whatever a directory holds; each batch is taken in name order.
func (s *searcher) walk(d *os.Root, rel string) error {
	f, err := d.Open(".")
	if err != nil {
		return s.fail(rel, err)
	}
	defer f.Close()
	for {
		ents, rerr := f.ReadDir(dirBatch)
		slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range ents {
			if err := s.check(); err != nil {
				return err
			}
			name := e.Name()
			child := name
			if rel != "" {
				child = rel + "/" + name
			}
			switch t := e.Type(); {
			case t.IsDir():
				if name == ".git" || name == ".sandbox-mcp" || s.excluded(child) {
					continue
				}
				if s.skipTop && rel == "" && (name == "proc" || name == "sys" || name == "dev") {
					continue
				}
				sub, err := d.OpenRoot(name)
				if err != nil {
					if err := s.fail(child, err); err != nil {
						return err
					}
					continue
				}
				err = s.walk(sub, child)
				sub.Close()
				if err != nil {
					return err
				}
			case t.IsRegular():
				if s.excluded(child) || !s.included(child) {
					continue
				}
				if err := s.file(d, name, child); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF || len(ents) == 0 {
			return nil
		}
		if rerr != nil {
			return s.fail(rel, rerr)
		}
	}
}

func (s *searcher) excluded(rel string) bool {
	for _, g := range s.exclude {
		if g.match(rel) {
			return true
		}
	}
	return false
}

func (s *searcher) included(rel string) bool {
	if len(s.include) == 0 {
		return true
	}
	for _, g := range s.include {
		if g.match(rel) {
			return true
		}
	}
	return false
}

// file searches one regular file. O_NONBLOCK keeps a file swapped for a
// FIFO from blocking the open; the fstat after it refuses anything but a
// regular file.
func (s *searcher) file(d *os.Root, name, rel string) error {
	f, err := d.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil // a symlink swapped in: not followed
		}
		return s.fail(rel, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	s.sum.FilesScanned++
	s.rel, s.matched, s.lineNo, s.tail, s.pending, s.afterNeed = rel, false, 1, s.tail[:0], nil, 0
	s.startsMid, s.endsMid = false, false
	err = s.scan(f)
	if perr := s.flushPending(); perr != nil && err == nil {
		err = perr
	}
	if s.matched {
		s.sum.FilesMatched++
	}
	if err != nil && !errors.Is(err, errStop) && !errors.Is(err, errBinary) {
		return s.fail(rel, err)
	}
	if errors.Is(err, errBinary) {
		s.sum.BinarySkipped++
		return nil
	}
	return err
}

var errBinary = errors.New("binary")

// scan reads f in chunks of whole lines and matches each chunk.
func (s *searcher) scan(f *os.File) error {
	buf := s.buf
	have := 0
	first := true
	for {
		n, err := io.ReadFull(f, buf[have:])
		have += n
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return err
		}
		if first {
			first = false
			if bytes.IndexByte(buf[:min(have, binarySniff)], 0) >= 0 {
				return errBinary
			}
		}
		end := have
		if !eof {
			if i := bytes.LastIndexByte(buf[:have], '\n'); i >= 0 {
				end = i + 1
			} else if len(buf) < maxChunkBytes {
				// One line fills the buffer: grow it and read on.
				nb := make([]byte, min(2*len(buf), maxChunkBytes))
				copy(nb, buf[:have])
				buf, s.buf = nb, nb
				continue
			}
			// else: a line longer than maxChunkBytes is matched in pieces.
		}
		s.endsMid = !eof && buf[end-1] != '\n'
		if err := s.chunk(buf[:end]); err != nil {
			return err
		}
		s.startsMid = s.endsMid
		if eof {
			return nil
		}
		have = copy(buf, buf[end:have])
		if err := s.ctx.Err(); err != nil {
			return s.stop("timeout")
		}
	}
}

// chunk matches data, whole lines (the last may lack its newline at the end
// of the file, or be a piece of a very long line).
func (s *searcher) chunk(data []byte) error {
	pos := 0     // where the next search starts (a line start)
	counted := 0 // s.lineNo + newlines in data[:counted] is the line at counted
	line := s.lineNo
	for pos < len(data) {
		ms := s.find(data[pos:])
		if ms < 0 {
			break
		}
		ms += pos
		ls := bytes.LastIndexByte(data[:ms], '\n') + 1
		le := len(data)
		if i := bytes.IndexByte(data[ms:], '\n'); i >= 0 {
			le = ms + i
		}
		line += int64(bytes.Count(data[counted:ls], nl))
		counted = ls
		text := data[ls:le]
		if err := s.feedAfter(data, ls); err != nil {
			return err
		}
		if loc := s.re.FindIndex(text); loc != nil {
			if err := s.match(data, ls, le, line, loc); err != nil {
				return err
			}
		}
		pos = le + 1
	}
	if err := s.feedAfter(data, len(data)); err != nil {
		return err
	}
	s.afterFrom = 0
	// Remember where the next chunk starts and its context.
	s.lineNo = line + int64(bytes.Count(data[counted:], nl))
	if s.opts.Context > 0 {
		s.keepTail(data)
	}
	return nil
}

var nl = []byte{'\n'}

// find returns the offset of the first possible match in data, or -1.
func (s *searcher) find(data []byte) int {
	if s.lit != nil {
		return bytes.Index(data, s.lit)
	}
	loc := s.re.FindIndex(data)
	if loc == nil {
		return -1
	}
	return loc[0]
}

// match reports the line data[ls:le], number line, matched at loc within it.
func (s *searcher) match(data []byte, ls, le int, line int64, loc []int) error {
	if err := s.flushPending(); err != nil {
		return err
	}
	if s.sum.Matches >= int64(s.opts.MaxMatches) {
		return s.stop("max_matches")
	}
	text, cut := s.cutLine(data[ls:le], loc[0])
	cut = cut || ls == 0 && s.startsMid || le == len(data) && s.endsMid
	r := &Record{Type: "match", Path: s.rel, Line: line, Text: text, Cut: cut}
	size := int64(len(text))
	if c := s.opts.Context; c > 0 {
		r.Before = s.before(data, ls, c)
		for _, b := range r.Before {
			size += int64(len(b))
		}
	}
	if s.bytes+size > s.opts.MaxBytes && s.sum.Matches > 0 {
		return s.stop("max_bytes")
	}
	s.bytes += size
	s.sum.Matches++
	s.matched = true
	s.pending, s.afterNeed = r, s.opts.Context
	s.afterFrom = le + 1
	if s.afterNeed == 0 {
		return s.flushPending()
	}
	return nil
}

// before returns up to n lines before the line starting at ls, reaching
// into the previous chunk's tail when needed.
func (s *searcher) before(data []byte, ls, n int) []string {
	var lines []string
	end := ls
	for len(lines) < n && end > 0 {
		start := bytes.LastIndexByte(data[:end-1], '\n') + 1
		t, _ := s.cutLine(data[start:end-1], 0)
		lines = append(lines, t)
		end = start
	}
	for i := len(s.tail) - 1; len(lines) < n && i >= 0 && end == 0; i-- {
		lines = append(lines, s.tail[i])
	}
	slices.Reverse(lines)
	return lines
}

// keepTail remembers the last Context lines up to the end of data.
func (s *searcher) keepTail(data []byte) {
	var lines []string
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for len(lines) < s.opts.Context {
		start := bytes.LastIndexByte(data[:end], '\n') + 1
		t, _ := s.cutLine(data[start:end], 0)
		lines = append(lines, t)
		if start == 0 {
			break
		}
		end = start - 1
	}
	for i := len(s.tail) - 1; len(lines) < s.opts.Context && i >= 0; i-- {
		lines = append(lines, s.tail[i])
	}
	slices.Reverse(lines)
	s.tail = lines
}

// feedAfter gives the pending match the lines of data from afterFrom up to
// upto, while it wants more after-context.
func (s *searcher) feedAfter(data []byte, upto int) error {
	for s.pending != nil && s.afterNeed > 0 && s.afterFrom < upto {
		end := upto
		if i := bytes.IndexByte(data[s.afterFrom:upto], '\n'); i >= 0 {
			end = s.afterFrom + i
		}
		t, _ := s.cutLine(data[s.afterFrom:end], 0)
		if s.bytes+int64(len(t)) <= s.opts.MaxBytes {
			s.bytes += int64(len(t))
			s.pending.After = append(s.pending.After, t)
		}
		s.afterFrom = end + 1
		s.afterNeed--
	}
	if s.pending != nil && s.afterNeed == 0 {
		return s.flushPending()
	}
	return nil
}

// flushPending emits the pending match.
func (s *searcher) flushPending() error {
	if s.pending == nil {
		return nil
	}
	r := s.pending
	s.pending, s.afterNeed = nil, 0
	return s.emit(r)
}

// cutLine returns line as text, at most MaxLineBytes of it around at (a
// match offset), valid UTF-8, and whether it was cut.
func (s *searcher) cutLine(line []byte, at int) (string, bool) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	limit := s.opts.MaxLineBytes
	if len(line) <= limit {
		return strings.ToValidUTF8(string(line), "\uFFFD"), false
	}
	start := max(0, min(at-limit/4, len(line)-limit))
	piece := line[start : start+limit]
	// Do not start or end inside a rune.
	for i := 0; i < utf8.UTFMax && len(piece) > 0 && !utf8.RuneStart(piece[0]); i++ {
		piece = piece[1:]
	}
	for i := 0; i < utf8.UTFMax && len(piece) > 0; i++ {
		r, size := utf8.DecodeLastRune(piece)
		if r != utf8.RuneError || size != 1 {
			break
		}
		piece = piece[:len(piece)-1]
	}
	return strings.ToValidUTF8(string(piece), "\uFFFD"), true
}

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
//
// One goroutine walks the tree in name order while GOMAXPROCS workers scan
// its files; the results are written in walk order, and the bounds are
// applied in that order too, so the output does not depend on timing
// (short of the timeout).
package search

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
	return regexp.Compile(patternSource(pattern, literal, ignoreCase))
}

// patternSource is the regular expression CompilePattern compiles.
func patternSource(pattern string, literal, ignoreCase bool) string {
	p := pattern
	if literal {
		p = regexp.QuoteMeta(p)
	}
	if ignoreCase {
		return "(?mi)" + p
	}
	return "(?m)" + p
}

// job is one entry of the walk, in walk order: a file for a worker to
// scan, or a directory error already in res.
type job struct {
	dir       *dirRef
	name, rel string
	res       chan *fileResult // capacity 1
}

// dirRef is an open directory shared by the walk and the workers scanning
// its files; the last to let go closes it.
type dirRef struct {
	root *os.Root
	dir  *os.File // the directory open for reading, and its descriptor
	fd   int
	refs atomic.Int32
	keep bool // root is owned by Run, not closed here
}

func (d *dirRef) release() {
	if d.refs.Add(-1) != 0 {
		return
	}
	if d.dir != nil {
		d.dir.Close()
	}
	if !d.keep {
		d.root.Close()
	}
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
	m, err := newMatcher(opts.Pattern, opts.Literal, opts.IgnoreCase)
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	if !path.IsAbs(opts.Root) {
		return fmt.Errorf("search: root %q is not absolute", opts.Root)
	}
	wk := &walker{opts: &opts, skipTop: path.Clean(opts.Root) == "/"}
	for _, g := range opts.Include {
		wk.include = append(wk.include, compileGlob(g))
	}
	for _, g := range opts.Exclude {
		wk.exclude = append(wk.exclude, compileGlob(g))
	}
	dir := path.Clean("/" + opts.Dir)[1:] // "" for the root; never above it
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
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
	e := &emitter{opts: &opts, out: bufio.NewWriterSize(w, 64<<10)}
	e.enc = json.NewEncoder(e.out)
	e.enc.SetEscapeHTML(false)
	if err := e.enc.Encode(&Record{Type: "start", Version: ProtocolVersion}); err != nil {
		return err
	}

	workers := max(1, runtime.GOMAXPROCS(0))
	jobs := make(chan *job, 4*workers)
	order := make(chan *job, 8*workers)
	quit := make(chan struct{})
	wk.ctx, wk.jobs, wk.order, wk.quit = ctx, jobs, order, quit
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := newScanner(m, &opts, ctx, quit)
			for j := range jobs {
				j.res <- sc.file(j)
				j.dir.release()
			}
		}()
	}
	var walkReason string
	go func() {
		defer close(order)
		defer close(jobs)
		top := &dirRef{root: start, keep: true}
		top.refs.Store(1)
		walkReason = wk.walk(top, dir)
		top.release()
	}()

	err = e.consume(order)
	close(quit)
	for range order {
		// Let the walk see quit and end.
	}
	wg.Wait()
	if err != nil {
		return err
	}
	if !e.sum.Truncated && walkReason != "" {
		e.sum.Truncated, e.sum.Reason = true, walkReason
	}
	e.sum.ElapsedMS = time.Since(started).Milliseconds()
	if err := e.enc.Encode(&Record{Type: "done", Summary: &e.sum}); err != nil {
		return err
	}
	return e.out.Flush()
}

// unwrapPath drops the absolute path an *fs.PathError carries.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// walker walks the tree depth first and hands its entries on in order.
type walker struct {
	opts             *Options
	include, exclude []glob
	skipTop          bool // Root is "/": leave /proc, /sys and /dev alone
	ctx              context.Context
	jobs, order      chan *job
	quit             chan struct{}
	files            int64 // files handed to the workers
}

// errQuit says the consumer has stopped reading.
var errQuit = errors.New("search: stopped")

// send puts j in the output order and, when it is a file, in the workers'
// queue.
func (wk *walker) send(j *job, file bool) error {
	select {
	case wk.order <- j:
	case <-wk.quit:
		return errQuit
	}
	if !file {
		return nil
	}
	j.dir.refs.Add(1)
	select {
	case wk.jobs <- j:
		return nil
	case <-wk.quit:
		j.dir.release()
		return errQuit
	}
}

// fail hands on an error record for rel in walk order.
func (wk *walker) fail(rel string, err error) error {
	j := &job{rel: rel, res: make(chan *fileResult, 1)}
	j.res <- &fileResult{rel: rel, err: unwrapPath(err)}
	return wk.send(j, false)
}

// walk walks the directory d, whose Root-relative path is rel, and returns
// the bound that ended the walk early ("timeout", "max_files"), if any.
func (wk *walker) walk(d *dirRef, rel string) string {
	reason, _ := wk.walkDir(d, rel)
	return reason
}

// walkDir reads d in batches, so memory stays bounded whatever a directory
// holds, each batch taken in name order.
func (wk *walker) walkDir(d *dirRef, rel string) (string, error) {
	f, err := d.root.Open(".")
	if err != nil {
		return "", wk.fail(rel, err)
	}
	d.dir, d.fd = f, dirFD(f) // closed with d
	for {
		ents, rerr := f.ReadDir(dirBatch)
		slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range ents {
			if wk.ctx.Err() != nil {
				return "timeout", nil
			}
			if wk.files >= wk.opts.MaxFiles {
				return "max_files", nil
			}
			name := e.Name()
			child := name
			if rel != "" {
				child = rel + "/" + name
			}
			switch t := e.Type(); {
			case t.IsDir():
				if name == ".git" || name == ".sandbox-mcp" || wk.excluded(child) {
					continue
				}
				if wk.skipTop && rel == "" && (name == "proc" || name == "sys" || name == "dev") {
					continue
				}
				sub, err := d.root.OpenRoot(name)
				if err != nil {
					if err := wk.fail(child, err); err != nil {
						return "", err
					}
					continue
				}
				sd := &dirRef{root: sub}
				sd.refs.Store(1)
				reason, err := wk.walkDir(sd, child)
				sd.release()
				if reason != "" || err != nil {
					return reason, err
				}
			case t.IsRegular():
				if wk.excluded(child) || !wk.included(child) {
					continue
				}
				wk.files++
				if err := wk.send(&job{dir: d, name: name, rel: child, res: make(chan *fileResult, 1)}, true); err != nil {
					return "", err
				}
			}
		}
		if rerr == io.EOF || len(ents) == 0 {
			return "", nil
		}
		if rerr != nil {
			return "", wk.fail(rel, rerr)
		}
	}
}

func (wk *walker) excluded(rel string) bool {
	for _, g := range wk.exclude {
		if g.match(rel) {
			return true
		}
	}
	return false
}

func (wk *walker) included(rel string) bool {
	if len(wk.include) == 0 {
		return true
	}
	for _, g := range wk.include {
		if g.match(rel) {
			return true
		}
	}
	return false
}

// emitter writes the results in walk order and applies the bounds on
// matches and bytes.
type emitter struct {
	opts  *Options
	out   *bufio.Writer
	enc   *json.Encoder
	sum   Summary
	bytes int64
	line  []byte // the record being built
}

// consume writes the results of the jobs in order until they end or a
// bound is reached.
func (e *emitter) consume(order <-chan *job) error {
	for j := range order {
		r := <-j.res
		stop, err := e.result(r)
		resultPool.Put(r)
		if err != nil || stop {
			return err
		}
	}
	return nil
}

// stop records why the search ends early.
func (e *emitter) stop(reason string) (bool, error) {
	e.sum.Truncated, e.sum.Reason = true, reason
	return true, nil
}

// result writes one file's records and reports whether a bound ends the
// search there.
func (e *emitter) result(r *fileResult) (bool, error) {
	if r.scanned {
		e.sum.FilesScanned++
	}
	if r.binary {
		e.sum.BinarySkipped++
		return false, nil
	}
	matched := false
	defer func() {
		if matched {
			e.sum.FilesMatched++
		}
	}()
	for i := range r.hits {
		h := &r.hits[i]
		if e.sum.Matches >= int64(e.opts.MaxMatches) {
			return e.stop("max_matches")
		}
		if e.bytes+h.size > e.opts.MaxBytes && e.sum.Matches > 0 {
			return e.stop("max_bytes")
		}
		e.bytes += h.size
		e.sum.Matches++
		matched = true
		after := 0
		for _, s := range r.ctx[h.after[0]:h.after[1]] {
			if n := int64(s.end - s.off); e.bytes+n <= e.opts.MaxBytes {
				e.bytes += n
				r.ctx[h.after[0]+after] = s
				after++
			}
		}
		h.after[1] = h.after[0] + after
		e.line = appendMatch(e.line[:0], r, h)
		if _, err := e.out.Write(e.line); err != nil {
			return true, err
		}
	}
	if r.err != nil {
		e.sum.Errors++
		if err := e.enc.Encode(&Record{Type: "error", Path: r.rel, Error: r.err.Error()}); err != nil {
			return true, err
		}
	}
	if r.timedOut {
		return e.stop("timeout")
	}
	return false, nil
}

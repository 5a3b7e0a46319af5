package search

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"unicode/utf8"
)

// span is the bytes arena[off:end] of a fileResult.
type span struct{ off, end int }

// hit is one matching line of a file.
type hit struct {
	line int64
	text span
	cut  bool
	// size is the bytes of text and before, which the max-bytes bound
	// counts.
	size int64
	// before and after are ranges of fileResult.ctx: the context lines.
	before, after [2]int
}

// fileResult is what a worker found in one file (or the walk's error for a
// directory).
type fileResult struct {
	rel      string
	scanned  bool // a regular file was opened and read
	binary   bool
	timedOut bool // the timeout ended the scan
	err      error
	hits     []hit
	ctx      []span
	arena    []byte
}

// resultPool keeps the fileResults the emitter is done with, so their
// slices are reused.
var resultPool = sync.Pool{New: func() any { return new(fileResult) }}

func newResult(rel string) *fileResult {
	r := resultPool.Get().(*fileResult)
	*r = fileResult{rel: rel, hits: r.hits[:0], ctx: r.ctx[:0], arena: r.arena[:0]}
	return r
}

// scanner scans files for one worker. A file is read in chunks of whole
// lines into buf, which grows up to maxChunkBytes for a long line.
type scanner struct {
	m    *matcher
	opts *Options
	ctx  context.Context
	quit <-chan struct{}
	buf  []byte

	// per file
	res       *fileResult
	lineNo    int64  // line number of the first byte of the chunk
	tail      []byte // the last Context lines before the chunk, each ending in '\n'
	pending   int    // index in res.hits of a match still collecting after-context, or -1
	afterNeed int    // lines of after-context still wanted
	afterFrom int    // where in the chunk the next after-context line starts
	size      int64  // sum of the hits' sizes
	// startsMid and endsMid say the chunk begins or ends inside a line
	// longer than maxChunkBytes, which is matched piece by piece (a match
	// that spans two pieces is not seen).
	startsMid, endsMid bool
}

func newScanner(m *matcher, opts *Options, ctx context.Context, quit <-chan struct{}) *scanner {
	return &scanner{m: m, opts: opts, ctx: ctx, quit: quit, buf: make([]byte, chunkBytes)}
}

var errBinary = errors.New("binary")

// errFull ends a file's scan once it holds enough hits.
var errFull = errors.New("search: enough hits")

// file scans one regular file of j's directory.
func (s *scanner) file(j *job) *fileResult {
	r := newResult(j.rel)
	select {
	case <-s.quit:
		return r
	default:
	}
	if s.ctx.Err() != nil {
		r.timedOut = true
		return r
	}
	f, size, ok, err := openRegular(j.dir, j.name)
	if err != nil {
		r.err = err
		return r
	}
	if !ok {
		return r
	}
	defer f.Close()
	r.scanned = true
	s.res, s.lineNo, s.tail, s.pending, s.afterNeed, s.afterFrom = r, 1, s.tail[:0], -1, 0, 0
	s.size, s.startsMid, s.endsMid = 0, false, false
	err = s.scan(f, size)
	s.res = nil
	switch {
	case errors.Is(err, errBinary):
		r.binary = true
		r.hits = r.hits[:0]
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		r.timedOut = true
	case err != nil && !errors.Is(err, errFull):
		r.err = unwrapPath(err)
	}
	return r
}

// scan reads f, of size bytes when it was opened, in chunks of whole lines
// and matches each chunk.
func (s *scanner) scan(f io.Reader, size int64) error {
	buf := s.buf
	have := 0
	total := int64(0)
	first := true
	for {
		eof := false
		for have < len(buf) {
			n, err := f.Read(buf[have:])
			have += n
			total += int64(n)
			if errors.Is(err, io.EOF) || n == 0 && err == nil {
				eof = true
				break
			}
			if err != nil {
				return err
			}
			if first && total >= size {
				// The whole file as fstat saw it: no read for the EOF.
				eof = true
				break
			}
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
		if end == 0 {
			return nil
		}
		s.endsMid = !eof && buf[end-1] != '\n'
		if err := s.chunk(buf[:end], !eof); err != nil {
			return err
		}
		s.startsMid = s.endsMid
		if eof {
			return nil
		}
		have = copy(buf, buf[end:have])
		if err := s.ctx.Err(); err != nil {
			return err
		}
	}
}

// chunk matches data, whole lines (the last may lack its newline at the end
// of the file, or be a piece of a very long line); more says another chunk
// follows.
func (s *scanner) chunk(data []byte, more bool) error {
	pos := 0     // where the next search starts (a line start)
	counted := 0 // s.lineNo + newlines in data[:counted] is the line at counted
	line := s.lineNo
	for pos < len(data) {
		c := s.m.candidate(data[pos:])
		if c < 0 {
			break
		}
		ms := pos + c
		ls := bytes.LastIndexByte(data[:ms], '\n') + 1
		le := len(data)
		if i := bytes.IndexByte(data[ms:], '\n'); i >= 0 {
			le = ms + i
		}
		line += int64(bytes.Count(data[counted:ls], nl))
		counted = ls
		s.feedAfter(data, ls)
		if at := s.m.matchLine(data[ls:le], ms-ls); at >= 0 {
			if err := s.match(data, ls, le, line, at); err != nil {
				return err
			}
		}
		pos = le + 1
	}
	s.feedAfter(data, len(data))
	s.afterFrom = 0
	// Remember where the next chunk starts and its context.
	s.lineNo = line + int64(bytes.Count(data[counted:], nl))
	if more && s.opts.Context > 0 {
		s.keepTail(data)
	}
	return nil
}

var nl = []byte{'\n'}

// match records the line data[ls:le], number line, matched at offset at
// within it. Once the file holds more hits than the bounds could let
// through, scanning it ends: the emitter stops at or before the last.
func (s *scanner) match(data []byte, ls, le int, line int64, at int) error {
	r := s.res
	s.pending, s.afterNeed = -1, 0
	h := hit{line: line}
	h.text, h.cut = s.cutLine(data[ls:le], at)
	h.cut = h.cut || ls == 0 && s.startsMid || le == len(data) && s.endsMid
	h.size = int64(h.text.end - h.text.off)
	if c := s.opts.Context; c > 0 {
		h.before[0] = len(r.ctx)
		s.before(data, ls, c)
		h.before[1] = len(r.ctx)
		for _, b := range r.ctx[h.before[0]:h.before[1]] {
			h.size += int64(b.end - b.off)
		}
	}
	h.after = [2]int{len(r.ctx), len(r.ctx)}
	r.hits = append(r.hits, h)
	s.size += h.size
	n := len(r.hits)
	// The emitter stops at hit n-1 (0-based) when it has MaxMatches before
	// it, or, past the first, when the bytes would exceed MaxBytes: it
	// never shows this hit, nor needs what follows it.
	if n > s.opts.MaxMatches || n >= 2 && s.size > s.opts.MaxBytes {
		return errFull
	}
	if s.opts.Context > 0 {
		s.pending, s.afterNeed, s.afterFrom = n-1, s.opts.Context, le+1
	}
	return nil
}

// before appends to res.ctx up to n lines before the line starting at ls,
// reaching into the previous chunk's tail when needed, oldest first.
func (s *scanner) before(data []byte, ls, n int) {
	r := s.res
	from := len(r.ctx)
	end := ls
	for len(r.ctx)-from < n && end > 0 {
		start := bytes.LastIndexByte(data[:end-1], '\n') + 1
		sp, _ := s.cutLine(data[start:end-1], 0)
		r.ctx = append(r.ctx, sp)
		end = start
	}
	if end == 0 {
		// The tail's lines, newest first.
		t := s.tail
		for len(r.ctx)-from < n && len(t) > 0 {
			start := bytes.LastIndexByte(t[:len(t)-1], '\n') + 1
			sp, _ := s.cutLine(t[start:len(t)-1], 0)
			r.ctx = append(r.ctx, sp)
			t = t[:start]
		}
	}
	reverse(r.ctx[from:])
}

func reverse(s []span) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

// keepTail remembers the last Context lines up to the end of data (cut to
// MaxLineBytes), after what it kept of earlier chunks.
func (s *scanner) keepTail(data []byte) {
	var lines [][]byte
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for len(lines) < s.opts.Context {
		start := bytes.LastIndexByte(data[:end], '\n') + 1
		lines = append(lines, data[start:end])
		if start == 0 {
			break
		}
		end = start - 1
	}
	var kept []byte
	if short := s.opts.Context - len(lines); short > 0 {
		// Keep the newest `short` lines of the old tail.
		t := s.tail
		for i := 0; i < short && len(t) > 0; i++ {
			t = t[:bytes.LastIndexByte(t[:len(t)-1], '\n')+1]
		}
		kept = append(kept, s.tail[len(t):]...)
	}
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if len(l) > s.opts.MaxLineBytes {
			l = l[:s.opts.MaxLineBytes+utf8.UTFMax] // cutLine cuts it again when used
		}
		kept = append(append(kept, l...), '\n')
	}
	s.tail = kept
}

// feedAfter gives the pending hit the lines of data from afterFrom up to
// upto, while it wants more after-context.
func (s *scanner) feedAfter(data []byte, upto int) {
	r := s.res
	for s.pending >= 0 && s.afterNeed > 0 && s.afterFrom < upto {
		end := upto
		if i := bytes.IndexByte(data[s.afterFrom:upto], '\n'); i >= 0 {
			end = s.afterFrom + i
		}
		sp, _ := s.cutLine(data[s.afterFrom:end], 0)
		r.ctx = append(r.ctx, sp)
		r.hits[s.pending].after[1] = len(r.ctx)
		s.afterFrom = end + 1
		s.afterNeed--
	}
	if s.afterNeed == 0 {
		s.pending = -1
	}
}

// cutLine appends line to the arena, at most MaxLineBytes of it around at
// (a match offset), as valid UTF-8, and says whether it was cut.
func (s *scanner) cutLine(line []byte, at int) (span, bool) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	limit := s.opts.MaxLineBytes
	cut := false
	if len(line) > limit {
		cut = true
		start := max(0, min(at-limit/4, len(line)-limit))
		line = line[start : start+limit]
		// Do not start or end inside a rune.
		for i := 0; i < utf8.UTFMax && len(line) > 0 && !utf8.RuneStart(line[0]); i++ {
			line = line[1:]
		}
		for i := 0; i < utf8.UTFMax && len(line) > 0; i++ {
			r, size := utf8.DecodeLastRune(line)
			if r != utf8.RuneError || size != 1 {
				break
			}
			line = line[:len(line)-1]
		}
	}
	r := s.res
	off := len(r.arena)
	if utf8.Valid(line) {
		r.arena = append(r.arena, line...)
	} else {
		r.arena = append(r.arena, bytes.ToValidUTF8(line, []byte("\uFFFD"))...)
	}
	return span{off, len(r.arena)}, cut
}

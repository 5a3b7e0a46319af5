package tools

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// lastLineCap bounds the "last line" a progress message quotes.
const lastLineCap = 120

// inlineText is one stream rendered for the model: the captured head and
// tail as valid UTF-8, joined by a marker when bytes were cut.
type inlineText struct {
	Text string
	// Truncated reports that bytes between head and tail were left out.
	Truncated bool
	// InvalidUTF8 reports that bytes which are not UTF-8 were shown as U+FFFD.
	InvalidUTF8 bool
	// Omitted is how many bytes the marker stands for.
	Omitted int64
	// HeadBytes and TailBytes are how many bytes of the stream the text
	// shows before and after the marker (all in HeadBytes when not cut).
	HeadBytes, TailBytes int64
}

// renderInline turns what the client captured of one stream into text for
// the model. The head is cut back and the tail cut forward to rune
// boundaries, so the cut never splits a character; the bytes dropped there
// count as omitted. logRel is the workspace-relative log path ("" when the
// full log could not be saved), quoted in the marker.
func renderInline(o envdclient.Output, stream, logRel string) inlineText {
	if !o.Truncated {
		text, bad := validText(o.Bytes())
		return inlineText{Text: text, InvalidUTF8: bad, HeadBytes: o.Total}
	}
	head := trimIncompleteSuffix(o.Head)
	tail := trimContinuationPrefix(o.Tail)
	omitted := o.Total - int64(len(head)) - int64(len(tail))
	headText, badHead := validText(head)
	tailText, badTail := validText(tail)
	var b strings.Builder
	b.Grow(len(headText) + len(tailText) + 120)
	b.WriteString(headText)
	b.WriteString(omissionMarker(omitted, stream, logRel))
	b.WriteString(tailText)
	return inlineText{
		Text:        b.String(),
		Truncated:   true,
		InvalidUTF8: badHead || badTail,
		Omitted:     omitted,
		HeadBytes:   int64(len(head)),
		TailBytes:   int64(len(tail)),
	}
}

// omissionMarker is the line that stands for the cut bytes.
func omissionMarker(omitted int64, stream, logRel string) string {
	if logRel == "" {
		return fmt.Sprintf("\n… [%s bytes omitted; the full %s could not be saved] …\n", groupDigits(omitted), stream)
	}
	return fmt.Sprintf("\n… [%s bytes omitted; full %s in %s] …\n", groupDigits(omitted), stream, logRel)
}

// validText returns b as a string with each run of invalid UTF-8 replaced by
// U+FFFD, and whether any replacement happened.
func validText(b []byte) (string, bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), true
}

// trimIncompleteSuffix drops a rune cut short at the end of b (the start of
// a multi-byte character whose remaining bytes were not captured). Bytes
// that could never start a character are left for validText to replace.
func trimIncompleteSuffix(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		c := b[i]
		if c < utf8.RuneSelf {
			return b // ASCII: nothing cut
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}

// trimContinuationPrefix drops the continuation bytes at the start of b that
// belong to a character whose first bytes were cut off (at most three).
// Four or more in a row cannot be one character: they are left for
// validText to replace.
func trimContinuationPrefix(b []byte) []byte {
	for i := 0; i < len(b) && i < utf8.UTFMax; i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b
}

// cutAtRune returns how many bytes of b to hand out when b was cut at a
// page boundary (more bytes follow in the file): the length without a
// trailing incomplete character, unless that would leave nothing.
func cutAtRune(b []byte) int {
	n := len(trimIncompleteSuffix(b))
	if n == 0 {
		return len(b)
	}
	return n
}

// groupDigits writes n with a space between groups of three digits
// ("10 485 760"), which a reader parses at a glance.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// humanBytes renders n for progress messages ("4.1 KiB").
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit || u == "TiB" {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// truncatedNotice tells the agent a stream was cut and how to read the rest.
func truncatedNotice(stream string, total, head, tail int64, logRel string) string {
	where := "the full output could not be saved (see the other notice)"
	if logRel != "" {
		where = fmt.Sprintf("read the cut part with read_files on %s from offset %d (or its end with tail)", logRel, head)
	}
	return fmt.Sprintf("%s was %s bytes; showing the first %s and the last %s bytes; %s.",
		stream, groupDigits(total), groupDigits(head), groupDigits(tail), where)
}

// invalidUTF8Notice tells the agent bytes were replaced in a stream's text.
func invalidUTF8Notice(stream, logRel string) string {
	if logRel == "" {
		return fmt.Sprintf("%s contained bytes that are not valid UTF-8 (binary output?); they are shown as U+FFFD.", stream)
	}
	return fmt.Sprintf("%s contained bytes that are not valid UTF-8 (binary output?); they are shown as U+FFFD. %s keeps the exact bytes (read_files with encoding base64).", stream, logRel)
}

// logIncompleteNotice says a stream's log file could not be written.
func logIncompleteNotice(stream string, err error) string {
	return fmt.Sprintf("The full %s could not be saved to the workspace (%s); only the inline part above is available. The command itself ran normally.", stream, rootCause(err))
}

// streamLog writes one output stream into a log file in the sandbox while
// the command runs: the bytes flow through a pipe into envdclient.Upload, which
// starts on the first byte (a silent stream writes no file). Memory is
// bounded by the pipe, which holds nothing: a slow upload slows the reader.
// A failing upload never fails the command; it is reported by done.
//
// A log holds at most maxRunLogBytes of its stream: the rest is counted, not
// saved, and a last line says how much was left out (the result's totals
// are counted apart, and stay exact). The disk quota of a sandbox bounds
// all of its logs together; this bounds one flood.
//
// Write is called from one goroutine (the client's event loop); close from
// the same one after the run.
type streamLog struct {
	ctx   context.Context
	cli   *envdclient.Client
	claim *runClaim
	name  string // file name in the run directory

	pw      *io.PipeWriter
	uploadc chan error // receives Upload's result
	abs     string     // the log's absolute path once started
	failed  error      // why the log stopped receiving, if it did
	saved   int64      // bytes written to the log
	dropped int64      // bytes past maxRunLogBytes, not written
}

// maxRunLogBytes is the most a run log holds of one stream: 64 MiB.
const maxRunLogBytes = 64 << 20

// logCapMarker is the last line of a log that reached maxRunLogBytes.
func logCapMarker(dropped int64) string {
	return fmt.Sprintf("\n[sandbox-mcp: this log stops at %s; the remaining %s bytes of output were not saved]\n", humanBytes(maxRunLogBytes), groupDigits(dropped))
}

// errUploadEnded is what a write sees when the upload returned early.
var errUploadEnded = errors.New("the log upload ended before the output did")

func newStreamLog(ctx context.Context, cli *envdclient.Client, claim *runClaim, name string) *streamLog {
	return &streamLog{ctx: ctx, cli: cli, claim: claim, name: name}
}

// Write forwards p to the upload. It never reports an error to the caller:
// the command's output must keep flowing whatever happens to its log.
func (l *streamLog) Write(p []byte) (int, error) {
	if l.failed != nil || len(p) == 0 {
		return len(p), nil
	}
	n := len(p)
	if room := maxRunLogBytes - l.saved; int64(len(p)) > room {
		l.dropped += int64(len(p)) - room
		p = p[:room]
		if len(p) == 0 {
			return n, nil
		}
	}
	l.saved += int64(len(p))
	if l.pw == nil {
		dir, err := l.claim.claim(l.ctx)
		if err != nil {
			l.failed = err
			return len(p), nil
		}
		l.abs = path.Join(dir, l.name)
		pr, pw := io.Pipe()
		l.pw, l.uploadc = pw, make(chan error, 1)
		go func() {
			err := l.cli.Upload(l.ctx, l.abs, pr, envdclient.UploadOptions{})
			// Unblock a writer the upload stopped reading from.
			pr.CloseWithError(cmp.Or(err, errUploadEnded))
			l.uploadc <- err
		}()
	}
	if _, err := l.pw.Write(p); err != nil {
		l.failed = err
	}
	return n, nil
}

// finish ends the upload and waits for it. It returns the log's absolute
// path when the whole stream was saved, "" and nil when the stream was
// empty, or the error that left the log incomplete.
func (l *streamLog) finish() (string, error) {
	if l.pw == nil {
		return "", l.failed
	}
	if l.dropped > 0 && l.failed == nil {
		if _, err := io.WriteString(l.pw, logCapMarker(l.dropped)); err != nil {
			l.failed = err
		}
	}
	_ = l.pw.Close()
	if err := <-l.uploadc; err != nil {
		return "", err
	}
	if l.failed != nil {
		return "", l.failed
	}
	return l.abs, nil
}

// outputMeter counts a run's output and remembers its last line, for
// progress messages. It keeps raw bytes only; they are cleaned when a
// message is rendered. It is safe for concurrent use.
type outputMeter struct {
	mu      sync.Mutex
	bytes   [2]int64
	partial [2][]byte // the start of each stream's unfinished line (bounded)
	last    []byte    // the start of the most recent complete, non-blank line (bounded)
	lastAt  int       // the stream last heard from
}

// maxLineBytes bounds the raw bytes kept of a line: enough for lastLineCap
// characters of any width.
const maxLineBytes = 4 * lastLineCap

// tee returns a writer that meters stream i (0 stdout, 1 stderr) and passes
// the bytes on to next.
func (m *outputMeter) tee(i int, next io.Writer) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		m.observe(i, p)
		return next.Write(p)
	})
}

type writerFunc func(p []byte) (int, error)

// Write calls f.
func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (m *outputMeter) observe(i int, p []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bytes[i] += int64(len(p))
	m.lastAt = i
	j := lastLineBreak(p)
	if j < 0 {
		m.partial[i] = appendCapped(m.partial[i], p)
		return
	}
	// p completes lines up to j: the last non-blank one is the last line.
	end := j
	for {
		k := lastLineBreak(p[:end])
		if k < 0 {
			// The first line of p continues the unfinished one.
			line := appendCapped(m.partial[i], p[:end])
			if !isBlankLine(line) {
				m.last = append(m.last[:0], line...)
			}
			break
		}
		if line := p[k+1 : end]; !isBlankLine(line[:min(len(line), maxLineBytes)]) {
			m.last = append(m.last[:0], line[:min(len(line), maxLineBytes)]...)
			break
		}
		end = k
	}
	m.partial[i] = appendCapped(m.partial[i][:0], p[j+1:])
}

// lastLineBreak returns the index of the last \n or \r in p, or -1. It reads
// p back from its end only as far as its last \n.
func lastLineBreak(p []byte) int {
	j := bytes.LastIndexByte(p, '\n')
	if k := bytes.LastIndexByte(p[j+1:], '\r'); k >= 0 {
		return j + 1 + k
	}
	return j
}

// isBlankLine reports whether cleanLine would make b empty: it holds only
// control and space characters.
func isBlankLine(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if !unicode.IsControl(r) && !unicode.IsSpace(r) {
			return false
		}
		b = b[n:]
	}
	return true
}

func appendCapped(b, p []byte) []byte {
	if room := maxLineBytes - len(b); room > 0 {
		b = append(b, p[:min(room, len(p))]...)
	}
	return b
}

// cleanLine makes a line safe and short for a progress message.
func cleanLine(b []byte) string {
	s, _ := validText(b)
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) > lastLineCap {
		rs := []rune(s)
		s = string(rs[:lastLineCap-1]) + "…"
	}
	return s
}

// message renders the progress text: elapsed time, bytes, last line.
func (m *outputMeter) message(elapsed time.Duration) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d s, %s stdout", int64(elapsed/time.Second), humanBytes(m.bytes[0]))
	if m.bytes[1] > 0 {
		fmt.Fprintf(&b, ", %s stderr", humanBytes(m.bytes[1]))
	}
	last := cleanLine(m.partial[m.lastAt])
	if last == "" {
		last = cleanLine(m.last)
	}
	if last != "" {
		b.WriteString(", last line: ")
		b.WriteString(last)
	}
	return b.String()
}

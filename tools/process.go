package tools

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/invopop/jsonschema"

	"github.com/sandbox-mcp/sandbox-mcp/envd/client"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Limits of the process tools.
const (
	// maxEndedProcesses bounds the ended processes a workspace remembers;
	// the oldest are forgotten first (their logs stay in the sandbox).
	maxEndedProcesses = 200
	// defaultOutputBytes and maxOutputBytes bound one process_output page.
	defaultOutputBytes = 32 << 10
	maxOutputBytes     = 1 << 20
	// maxWaitSec bounds process_output's wait_sec.
	maxWaitSec = 60
	// killWait bounds how long process_signal waits for a KILLed process to
	// be reported gone.
	killWait = 10 * time.Second
	// watchFallbackPoll is how often process_output looks at the log when
	// the sandbox cannot watch directories (a fallback only).
	watchFallbackPoll = 500 * time.Millisecond
	// maxOtherProcesses bounds process_list's others.
	maxOtherProcesses = 100
)

// Process statuses, as the model sees them.
const (
	statusRunning = "running"
	statusExited  = "exited"
	statusKilled  = "killed"
	statusUnknown = "unknown"
)

// handleRef is a parsed run id (g<gen>-r<n>) or process handle
// (g<gen>-p<pid>): exactly one of run and pid is set.
type handleRef struct {
	gen int64
	run int64
	pid uint32
}

func formatRunID(gen, n int64) string { return fmt.Sprintf("g%d-r%d", gen, n) }

func formatProcessHandle(gen int64, pid uint32) string { return fmt.Sprintf("g%d-p%d", gen, pid) }

// parseHandle reads a run id or a process handle; ok is false for anything
// else (signs, spaces, zero or missing numbers).
func parseHandle(s string) (handleRef, bool) {
	rest, ok := strings.CutPrefix(s, "g")
	if !ok {
		return handleRef{}, false
	}
	genText, tail, ok := strings.Cut(rest, "-")
	if !ok || len(tail) < 2 {
		return handleRef{}, false
	}
	gen, ok := parsePositive(genText, 63)
	if !ok {
		return handleRef{}, false
	}
	switch tail[0] {
	case 'r':
		n, ok := parsePositive(tail[1:], 63)
		return handleRef{gen: int64(gen), run: int64(n)}, ok
	case 'p':
		n, ok := parsePositive(tail[1:], 32)
		return handleRef{gen: int64(gen), pid: uint32(n)}, ok
	}
	return handleRef{}, false
}

// parsePositive parses plain decimal digits into a number ≥ 1 of bits bits.
func parsePositive(s string, bits int) (uint64, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, bits)
	return n, err == nil && n > 0
}

// procEnd is how a process ended, as far as the server knows.
type procEnd struct {
	status   string // exited, killed or unknown
	exitCode *int
	signal   string
	timedOut bool
	endedAt  time.Time
	detail   string // why the status is unknown
	// lostContact is true when the event stream broke rather than the
	// process ending: it may still run, and a later lookup re-attaches.
	lostContact bool
}

// procEntry is one background process the tools started (or re-found in
// the sandbox after a restart).
type procEntry struct {
	handle    string
	gen       int64
	pid       uint32
	runID     string
	command   string // as given; "" when re-found and not running
	logAbs    string
	logRel    string
	runDirAbs string
	startedAt time.Time // zero when unknown (re-found)
	timeout   time.Duration
	done      chan struct{} // closed once end is set

	mu          sync.Mutex
	end         procEnd
	ended       bool
	stdinClosed bool
}

// state returns how the process stands now.
func (e *procEntry) state() (procEnd, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.ended {
		return procEnd{status: statusRunning}, false
	}
	return e.end, true
}

func (e *procEntry) setEnd(end procEnd) {
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return
	}
	e.end, e.ended = end, true
	e.mu.Unlock()
	close(e.done)
}

// endFromResult turns the client's view of an ended process into a procEnd.
func endFromResult(res *client.Result, err error) procEnd {
	now := time.Now()
	if err != nil || res == nil {
		return procEnd{status: statusUnknown, endedAt: now, lostContact: true,
			detail: fmt.Sprintf("the server lost contact with the process (%s); it may still be running", rootCause(err))}
	}
	code := res.ExitCode
	end := procEnd{status: statusExited, exitCode: &code, signal: res.Signal, timedOut: res.TimedOut, endedAt: now}
	if res.Signal != "" {
		end.status = statusKilled
	}
	return end
}

// processRegistry remembers the background processes of each workspace for
// its current generation, in memory: running ones until they end, and the
// last maxEndedProcesses ended ones, until the workspace's session ends
// (drop). It is safe for concurrent use; the zero value is ready.
type processRegistry struct {
	mu     sync.Mutex
	spaces map[string]*procSpace
}

type procSpace struct {
	gen   int64
	byPid map[uint32]*procEntry
	ended []*procEntry // oldest first
}

// add records e for workspace key and, when h is set, follows it until it
// ends. An entry of an older generation than the workspace's is not kept.
func (r *processRegistry) add(key string, e *procEntry, h *client.Handle) {
	r.mu.Lock()
	if r.spaces == nil {
		r.spaces = map[string]*procSpace{}
	}
	sp := r.spaces[key]
	if sp == nil || sp.gen < e.gen {
		// A new sandbox: what the old one ran is gone with it.
		sp = &procSpace{gen: e.gen, byPid: map[uint32]*procEntry{}}
		r.spaces[key] = sp
	}
	if sp.gen == e.gen {
		sp.byPid[e.pid] = e
	}
	r.mu.Unlock()
	if h != nil {
		go func() {
			res, err := h.Wait(context.Background())
			r.finish(key, e, endFromResult(res, err))
		}()
	}
}

// finish records e's end and forgets the oldest ended entries past the bound.
// An entry no longer in the registry (its workspace ended, or a newer
// sandbox replaced it) only learns its end.
func (r *processRegistry) finish(key string, e *procEntry, end procEnd) {
	e.setEnd(end)
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := r.spaces[key]
	if sp == nil || sp.byPid[e.pid] != e {
		return
	}
	sp.ended = append(sp.ended, e)
	for len(sp.ended) > maxEndedProcesses {
		old := sp.ended[0]
		sp.ended = sp.ended[1:]
		if sp.byPid[old.pid] == old {
			delete(sp.byPid, old.pid)
		}
	}
}

// drop forgets everything about key's processes (its session ended). The
// followers of processes still running only record their end in the entry.
func (r *processRegistry) drop(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.spaces, key)
}

// find returns the entry ref names in generation gen, or nil.
func (r *processRegistry) find(key string, ref handleRef) *procEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	sp := r.spaces[key]
	if sp == nil || sp.gen != ref.gen {
		return nil
	}
	if ref.pid != 0 {
		return sp.byPid[ref.pid]
	}
	runID := formatRunID(ref.gen, ref.run)
	for _, e := range sp.byPid {
		if e.runID == runID {
			return e
		}
	}
	return nil
}

// list returns key's entries of generation gen, oldest first.
func (r *processRegistry) list(key string, gen int64) []*procEntry {
	r.mu.Lock()
	sp := r.spaces[key]
	var out []*procEntry
	if sp != nil && sp.gen == gen {
		for _, e := range sp.byPid {
			out = append(out, e)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b *procEntry) int {
		if c := a.startedAt.Compare(b.startedAt); c != 0 {
			return c
		}
		return int(a.pid) - int(b.pid)
	})
	return out
}

// processNotFound is the error for a handle nothing is known about.
func processNotFound(handle string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf(
		"no background process %s in this workspace; process_list shows the processes started here", handle))
}

// findProcess resolves a handle (or a background run id) given in field to
// its entry, refusing handles of a previous sandbox. A process the registry
// does not know (the server restarted) is re-found in the sandbox through
// the symlink its start left in the runs directory.
func findProcess(ctx context.Context, c *Call, field, handle string) (*procEntry, *manage.Lease, error) {
	ref, ok := parseHandle(handle)
	if !ok {
		return nil, nil, inputErr(field, "%q is not a process handle; pass the process value workspace_exec returned with background: true (like g1-p42), or see process_list", handle)
	}
	// Refuse a handle of a replaced sandbox before touching the current one;
	// the lease tells again once acquired (it may be newer still).
	if err := c.d.Manager.CheckHandle(c.ws.Key, handle, ref.gen); err != nil {
		return nil, nil, err
	}
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case ref.gen < lease.Generation:
		return nil, nil, &manage.StaleError{Handle: handle, HandleGeneration: ref.gen, Generation: lease.Generation}
	case ref.gen > lease.Generation:
		return nil, nil, processNotFound(handle)
	}
	e := c.d.procs.find(c.ws.Key, ref)
	if e != nil {
		if end, ended := e.state(); !ended || !end.lostContact {
			return e, lease, nil
		}
	}
	found, err := recoverProcess(ctx, c, lease, ref, e)
	if err != nil {
		return nil, nil, err
	}
	return found, lease, nil
}

// recoverProcess re-finds a background process in the sandbox: a live one
// from envd's process list (its tag carries the run id), then it is
// re-attached and followed again; an ended one through the symlink its start
// left in the runs directory, with status unknown. known is the entry being
// refreshed (its stream broke), if any.
func recoverProcess(ctx context.Context, c *Call, lease *manage.Lease, ref handleRef, known *procEntry) (*procEntry, error) {
	live, err := lease.Client.List(ctx)
	if err != nil {
		return nil, c.Check(err)
	}
	return adoptProcess(ctx, c, lease, ref, known, live)
}

// adoptProcess is recoverProcess with envd's process list at hand.
func adoptProcess(ctx context.Context, c *Call, lease *manage.Lease, ref handleRef, known *procEntry, live []client.ProcessInfo) (*procEntry, error) {
	cli := lease.Client
	runsAbs := path.Join(lease.Sandbox.Workdir, runsDir)
	gen := lease.Generation
	pid, runID := ref.pid, ""
	if ref.run != 0 {
		runID = formatRunID(gen, ref.run)
	}
	if known != nil {
		pid, runID = known.pid, known.runID
	}
	var running *client.ProcessInfo
	for i, p := range live {
		kind, tagRun, ok := parseProcessTag(p.Tag)
		if ok && kind == tagBg && (p.Pid == pid || pid == 0 && tagRun == runID) && (runID == "" || tagRun == runID) {
			running, pid, runID = &live[i], p.Pid, tagRun
			break
		}
	}
	if running == nil && runID == "" {
		handle := formatProcessHandle(gen, pid)
		ent, err := cli.Stat(ctx, path.Join(runsAbs, handle))
		if client.IsNotFound(err) {
			return nil, processNotFound(handle)
		}
		if err != nil {
			return nil, c.Check(err)
		}
		target, ok := parseHandle(path.Base(ent.SymlinkTarget))
		if ent.Type != client.TypeSymlink || !ok || target.run == 0 || target.gen != gen {
			return nil, processNotFound(handle)
		}
		runID = path.Base(ent.SymlinkTarget)
	}
	if running == nil && pid == 0 {
		entries, err := cli.ListDir(ctx, runsAbs, 1)
		if err != nil && !client.IsNotFound(err) {
			return nil, c.Check(err)
		}
		for _, e := range entries {
			if h, ok := parseHandle(e.Name); ok && h.pid != 0 && h.gen == gen &&
				e.Type == client.TypeSymlink && path.Base(e.SymlinkTarget) == runID {
				pid = h.pid
			}
		}
		if pid == 0 {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf(
				"no background process has run id %s in this workspace (a foreground run keeps its logs in %s/%s)", runID, runsDir, runID))
		}
	}
	logAbs := path.Join(runsAbs, runID, outputLogName)
	e := &procEntry{
		handle:    formatProcessHandle(gen, pid),
		gen:       gen,
		pid:       pid,
		runID:     runID,
		logAbs:    logAbs,
		logRel:    path.Join(runsDir, runID, outputLogName),
		runDirAbs: path.Join(runsAbs, runID),
		done:      make(chan struct{}),
	}
	if known != nil {
		e.command, e.startedAt, e.timeout = known.command, known.startedAt, known.timeout
	}
	if running != nil {
		if e.command == "" {
			e.command = describeBackgroundArgs(running.Args)
		}
		h, err := cli.Connect(ctx, client.ByPid(pid), client.StartOptions{StdoutLimit: -1, StderrLimit: -1})
		if err == nil {
			c.d.procs.add(c.ws.Key, e, h)
			return e, nil
		}
		if !client.IsNotFound(err) {
			return nil, c.Check(err)
		}
		// It ended between the list and the attach.
	}
	detail := "the process is not running, and how it ended is unknown: it ended while this server was not following it (for example across a server restart)"
	if known != nil {
		if end, _ := known.state(); end.detail != "" {
			detail = end.detail + "; it is no longer running"
		}
	}
	c.d.procs.add(c.ws.Key, e, nil)
	c.d.procs.finish(c.ws.Key, e, procEnd{status: statusUnknown, endedAt: time.Now(), detail: detail})
	return e, nil
}

// describeBackgroundArgs recovers the user's command from the arguments of
// the background wrapper (see backgroundScript).
func describeBackgroundArgs(args []string) string {
	if len(args) < 7 {
		return ""
	}
	user := args[6:]
	if len(user) == 3 && (path.Base(user[0]) == "bash" || path.Base(user[0]) == "sh") && (user[1] == "-lc" || user[1] == "-c") {
		return user[2]
	}
	return shellQuoteArgs(user)
}

// processStatus is the shared part of the process tools' outputs.
type processStatus struct {
	Status   string `json:"status" jsonschema:"required,enum=running,enum=exited,enum=killed,enum=unknown" jsonschema_description:"running; exited (ended by itself: see exit_code); killed (ended by a signal, a timeout or process_signal); unknown (the server lost track of it, for example after a restart: the log can still be read)."`
	ExitCode *int   `json:"exit_code,omitempty" jsonschema_description:"Exit status once ended; 128 + the signal number when a signal ended it."`
	Signal   string `json:"signal,omitempty" jsonschema_description:"The signal that ended the process (terminated, killed, …), if one did."`
	TimedOut bool   `json:"timed_out,omitempty" jsonschema_description:"True when its timeout_sec deadline killed it."`
	Detail   string `json:"detail,omitempty" jsonschema_description:"Why the status is unknown, when it is."`
}

func statusOf(end procEnd) processStatus {
	return processStatus{Status: end.status, ExitCode: end.exitCode, Signal: end.signal, TimedOut: end.timedOut, Detail: end.detail}
}

// processOutputInput is process_output's arguments.
type processOutputInput struct {
	Process  string `json:"process" jsonschema:"required" jsonschema_description:"The process handle workspace_exec returned for a background command (like g1-p42); its run_id (like g1-r3) works too."`
	Offset   int64  `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Byte offset in the process's combined output log to read from. Default 0; pass the previous result's next_offset to continue."`
	WaitSec  int    `json:"wait_sec,omitempty" jsonschema:"minimum=0" jsonschema_description:"Seconds to wait (0 to 60) for output past offset or for the process to end, when there is none yet. Default 0: answer at once."`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"minimum=1" jsonschema_description:"Most bytes of output to return (default 32768, at most 1048576)."`
}

// JSONSchemaExtend publishes the limits runProcessOutput relies on.
func (processOutputInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "wait_sec").Maximum = schemaInt(maxWaitSec)
	maxBytes := schemaProp(s, "max_bytes")
	maxBytes.Maximum, maxBytes.Default = schemaInt(maxOutputBytes), defaultOutputBytes
}

// processOutputOutput is process_output's result.
type processOutputOutput struct {
	Meta
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle."`
	RunID   string `json:"run_id" jsonschema_description:"The run id of the process; its log is .sandbox-mcp/runs/<run_id>/output.log."`
	processStatus
	Output      string `json:"output" jsonschema_description:"Output (stdout and stderr interleaved) from offset to next_offset, as text."`
	Offset      int64  `json:"offset" jsonschema_description:"Where this page starts in the log."`
	NextOffset  int64  `json:"next_offset" jsonschema_description:"Where the next page starts: pass it as offset to continue."`
	TotalBytes  int64  `json:"total_bytes" jsonschema_description:"Size of the log now."`
	Truncated   bool   `json:"truncated" jsonschema_description:"True when more output is already available after next_offset (read again without waiting)."`
	EOF         bool   `json:"eof" jsonschema_description:"True when the process has ended and everything was read: nothing more will come."`
	InvalidUTF8 bool   `json:"invalid_utf8,omitempty" jsonschema_description:"True when the page had bytes that are not UTF-8; they are shown as U+FFFD (the log keeps the exact bytes)."`
	Log         string `json:"log" jsonschema_description:"Workspace-relative path of the log, readable with read_files."`
}

// ProcessOutput is the process_output tool: it reads a background process's
// output log from an offset, optionally waiting for more.
func ProcessOutput(d *Deps) Tool {
	return define(d, spec[processOutputInput, processOutputOutput]{
		name:  "process_output",
		title: "Read a background process's output",
		description: "Read the output (stdout and stderr interleaved) of a process started with workspace_exec background: true, from a byte offset; pass next_offset back to continue. " +
			"With wait_sec it waits up to that long for new output or for the process to end, so you can follow a process without busy polling. " +
			"It also reports the status (running, exited, killed) and exit_code, and works after the process ended: its log stays in the workspace.",
		toolset:     ToolsetProcess,
		annotations: Annotations{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false},
		run:         runProcessOutput,
	})
}

func runProcessOutput(ctx context.Context, c *Call, in *processOutputInput) (*processOutputOutput, error) {
	// The schema checks the ranges of offset, wait_sec and max_bytes.
	limit := int64(in.MaxBytes)
	if limit == 0 {
		limit = defaultOutputBytes
	}
	e, lease, err := findProcess(ctx, c, "process", in.Process)
	if err != nil {
		return nil, err
	}
	cli := lease.Client
	page := func() (logPage, error) {
		end, ended := e.state()
		p, err := readLog(ctx, cli, e.logAbs, in.Offset, limit)
		p.end, p.ended = end, ended
		return p, err
	}
	p, err := page()
	if err != nil {
		return nil, c.Check(err)
	}
	if len(p.data) == 0 && !p.ended && in.WaitSec > 0 {
		if p, err = waitForOutput(ctx, c, cli, e, time.Duration(in.WaitSec)*time.Second, page); err != nil {
			return nil, err
		}
	}
	// Hand out whole characters: a character cut by the page end (or still
	// being written) is left for the next read.
	n := len(p.data)
	final := p.ended && in.Offset+int64(n) >= p.size
	if !final {
		n = cutAtRune(p.data)
	}
	text, bad := validText(p.data[:n])
	next := in.Offset + int64(n)
	out := &processOutputOutput{
		Process:       e.handle,
		RunID:         e.runID,
		processStatus: statusOf(p.end),
		Output:        text,
		Offset:        in.Offset,
		NextOffset:    next,
		TotalBytes:    p.size,
		Truncated:     next < p.size,
		EOF:           p.ended && next >= p.size,
		InvalidUTF8:   bad,
		Log:           e.logRel,
	}
	if bad {
		c.Notice("%s", invalidUTF8Notice("The output", e.logRel))
	}
	if in.Offset > p.size {
		c.Notice("offset %d is past the end of the log (%d bytes); nothing was read.", in.Offset, p.size)
	}
	return out, nil
}

// logPage is one read of a process log.
type logPage struct {
	data  []byte
	size  int64 // the log's size at the time of the read
	end   procEnd
	ended bool // the process had ended before the read began
}

// readLog reads up to limit bytes of the log at abs from offset. A log that
// does not exist yet reads as empty.
func readLog(ctx context.Context, cli *client.Client, abs string, offset, limit int64) (logPage, error) {
	data, size, err := readRange(ctx, cli, abs, offset, limit)
	if client.IsNotFound(err) {
		return logPage{}, nil
	}
	if err != nil {
		return logPage{}, err
	}
	return logPage{data: data, size: size}, nil
}

// waitForOutput blocks until the log grows past the offset, the process
// ends, wait passes, or ctx ends. It watches the run directory for writes
// (no polling) and listens for the registry's end notification.
func waitForOutput(ctx context.Context, c *Call, cli *client.Client, e *procEntry, wait time.Duration, page func() (logPage, error)) (logPage, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var events <-chan client.FileEvent
	var poll <-chan time.Time
	var ticker *time.Ticker
	startPolling := func() {
		ticker = time.NewTicker(watchFallbackPoll)
		poll = ticker.C
	}
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	w, err := cli.Watch(ctx, e.runDirAbs, false, false)
	switch {
	case err == nil:
		defer w.Close()
		events = w.Events()
	case ctx.Err() != nil:
		return logPage{}, ctx.Err()
	case client.IsPossibleLoss(err):
		return logPage{}, c.Check(err)
	default:
		// The sandbox cannot watch this directory: look now and then instead.
		startPolling()
	}
	for {
		// Read after the watch is in place, so no write falls in between.
		p, err := page()
		if err != nil {
			return logPage{}, c.Check(err)
		}
		if len(p.data) > 0 || p.ended {
			return p, nil
		}
		select {
		case _, ok := <-events:
			if !ok {
				events = nil
				startPolling()
			}
		case <-poll:
		case <-e.done:
		case <-timer.C:
			return p, nil
		case <-ctx.Done():
			return logPage{}, ctx.Err()
		}
	}
}

// processInputInput is process_input's arguments.
type processInputInput struct {
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle (like g1-p42)."`
	Data    string `json:"data,omitempty" jsonschema_description:"Text to write to the process's standard input, exactly as given (add a trailing newline for line-oriented programs)."`
	Close   bool   `json:"close,omitempty" jsonschema_description:"Close standard input after writing data, so the process reads end-of-file. It cannot be reopened."`
}

// processInputOutput is process_input's result.
type processInputOutput struct {
	Meta
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle."`
	Written int    `json:"written" jsonschema_description:"Bytes written to standard input."`
	Closed  bool   `json:"closed" jsonschema_description:"True when standard input is now closed."`
}

// ProcessInput is the process_input tool: it writes to a background
// process's stdin or closes it.
func ProcessInput(d *Deps) Tool {
	return define(d, spec[processInputInput, processInputOutput]{
		name:  "process_input",
		title: "Write to a background process's input",
		description: "Write text to the standard input of a process started with workspace_exec background: true, and/or close its input (close: true) so it reads end-of-file. " +
			"Use process_output afterwards to see how it reacted. A process that has ended, or whose input was closed, takes no more input.",
		toolset: ToolsetProcess,
		annotations: Annotations{
			ReadOnly: false,
			// Not destructive in itself: it adds input to a process the agent
			// started and deletes or overwrites nothing; what the program does
			// with the input was decided when it was started.
			Destructive: false,
			Idempotent:  false, // the same text twice is read twice
			OpenWorld:   false,
		},
		run: runProcessInput,
	})
}

func runProcessInput(ctx context.Context, c *Call, in *processInputInput) (*processInputOutput, error) {
	if in.Data == "" && !in.Close {
		return nil, inputErr("data", "nothing to do: give data to write, close: true, or both")
	}
	e, lease, err := findProcess(ctx, c, "process", in.Process)
	if err != nil {
		return nil, err
	}
	if end, ended := e.state(); ended {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"process %s has already ended (%s), so it takes no more input", e.handle, describeEnd(end)))
	}
	e.mu.Lock()
	closed := e.stdinClosed
	e.mu.Unlock()
	if closed {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"the standard input of process %s was already closed, so it takes no more input", e.handle))
	}
	gone := func(err error) error {
		if client.IsStdinGone(err) {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"process %s no longer takes input (it ended or closed its input): %s", e.handle, rootCause(err)))
		}
		return c.Check(err)
	}
	out := &processInputOutput{Process: e.handle}
	if in.Data != "" {
		// A process that does not read its input would hold the call
		// forever once the pipe is full: bound the wait.
		inputWait := c.d.Config.InputWait
		wctx, cancel := context.WithTimeout(ctx, inputWait)
		n, err := sendInputCounted(wctx, lease.Client, e.pid, []byte(in.Data))
		cancel()
		if err != nil && ctx.Err() == nil && (connect.CodeOf(err) == connect.CodeDeadlineExceeded || errors.Is(err, context.DeadlineExceeded)) {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"process %s is not reading its standard input: %d of %d bytes went in within %s and the rest was not sent; check it with process_output",
				e.handle, n, len(in.Data), inputWait))
		}
		if err != nil {
			return nil, gone(err)
		}
		out.Written = n
	}
	if in.Close {
		// A process that ended (perhaps on the data just written) or
		// already closed its input has no input to close: that is success.
		if err := lease.Client.CloseStdin(ctx, client.ByPid(e.pid)); err != nil && !client.IsStdinGone(err) {
			if out.Written > 0 {
				c.Notice("The data was written, but closing standard input failed.")
			}
			return nil, c.Check(err)
		}
		e.mu.Lock()
		e.stdinClosed = true
		e.mu.Unlock()
		out.Closed = true
	}
	return out, nil
}

// describeEnd says how a process ended, for error messages.
func describeEnd(end procEnd) string {
	switch {
	case end.status == statusUnknown:
		return "how is unknown"
	case end.signal != "" && end.exitCode != nil:
		return fmt.Sprintf("killed by signal %s, exit code %d", end.signal, *end.exitCode)
	case end.exitCode != nil:
		return fmt.Sprintf("exit code %d", *end.exitCode)
	}
	return end.status
}

// processSignalInput is process_signal's arguments.
type processSignalInput struct {
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle (like g1-p42)."`
	Signal  string `json:"signal,omitempty" jsonschema:"enum=TERM,enum=KILL,default=TERM" jsonschema_description:"TERM (default) asks the process to stop and sends KILL if it has not ended within the server's grace period; KILL ends it at once. The signal goes to the process and its children."`
}

// processSignalOutput is process_signal's result.
type processSignalOutput struct {
	Meta
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle."`
	processStatus
	Sent            []string `json:"sent,omitempty" jsonschema_description:"The signals sent, in order (none when the process had already ended)."`
	EscalatedToKill bool     `json:"escalated_to_kill" jsonschema_description:"True when TERM did not end the process within the grace period and KILL was sent."`
	AlreadyEnded    bool     `json:"already_ended" jsonschema_description:"True when the process had ended before the signal reached it; nothing was sent."`
}

// ProcessSignal is the process_signal tool: it stops a background process,
// TERM first and KILL after a grace period.
func ProcessSignal(d *Deps) Tool {
	grace := d.Config.SignalGrace
	return define(d, spec[processSignalInput, processSignalOutput]{
		name:  "process_signal",
		title: "Stop a background process",
		description: fmt.Sprintf("Stop a process started with workspace_exec background: true, with its children. "+
			"TERM (default) asks it to stop and sends KILL if it is still running after %s; KILL ends it at once. "+
			"Returns its status and exit_code afterwards. Signalling a process that already ended is not an error: its status is reported.", grace),
		toolset:     ToolsetProcess,
		annotations: Annotations{ReadOnly: false, Destructive: true, Idempotent: true, OpenWorld: false},
		run:         runProcessSignal,
	})
}

func runProcessSignal(ctx context.Context, c *Call, in *processSignalInput) (*processSignalOutput, error) {
	sig, name := client.SIGTERM, "TERM" // the schema allows only TERM and KILL
	if in.Signal == "KILL" {
		sig, name = client.SIGKILL, "KILL"
	}
	e, lease, err := findProcess(ctx, c, "process", in.Process)
	if err != nil {
		return nil, err
	}
	out := &processSignalOutput{Process: e.handle}
	if end, ended := e.state(); ended {
		out.processStatus, out.AlreadyEnded = statusOf(end), true
		return out, nil
	}
	// send reports whether the signal reached the process: envd not knowing
	// the pid means it ended before the signal did.
	send := func(s client.Signal, name string) (bool, error) {
		err := lease.Client.SendSignal(ctx, client.ByPid(e.pid), s)
		if client.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, c.Check(err)
		}
		out.Sent = append(out.Sent, name)
		return true, nil
	}
	wait := func(d time.Duration) (bool, error) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-e.done:
			return true, nil
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	sent, err := send(sig, name)
	if err != nil {
		return nil, err
	}
	out.AlreadyEnded = !sent
	// Wait for the end (when nothing was sent, for its report).
	ended, err := wait(c.d.Config.SignalGrace)
	if err != nil {
		return nil, err
	}
	switch {
	case ended:
	case !sent:
		c.Notice("Process %s had already ended when the signal was sent, but how it ended has not been reported yet; check again with process_output.", e.handle)
	default:
		if sig == client.SIGTERM {
			if out.EscalatedToKill, err = send(client.SIGKILL, "KILL"); err != nil {
				return nil, err
			}
		}
		if ended, err = wait(killWait); err != nil {
			return nil, err
		}
		if !ended {
			c.Notice("Process %s was sent %s but was still reported running %s later; check again with process_output.", e.handle, out.Sent[len(out.Sent)-1], killWait)
		}
	}
	end, _ := e.state()
	out.processStatus = statusOf(end)
	return out, nil
}

// processListInput is process_list's (empty) arguments.
type processListInput struct{}

// processInfo describes one process in process_list.
type processInfo struct {
	Process string `json:"process" jsonschema:"required" jsonschema_description:"The process handle."`
	Pid     uint32 `json:"pid" jsonschema_description:"Process id in the sandbox."`
	RunID   string `json:"run_id" jsonschema_description:"The run id."`
	Command string `json:"command,omitempty" jsonschema_description:"The command as started (absent when the server re-found the process after a restart and it had ended)."`
	processStatus
	StartedAt string `json:"started_at,omitempty" jsonschema_description:"When it was started (RFC 3339), when known."`
	EndedAt   string `json:"ended_at,omitempty" jsonschema_description:"When the server saw it end (RFC 3339)."`
	Log       string `json:"log" jsonschema_description:"Workspace-relative path of its output log."`
}

// otherProcess is a live process in the sandbox that is not a tracked
// background process.
type otherProcess struct {
	Pid     uint32 `json:"pid" jsonschema_description:"Process id in the sandbox."`
	Command string `json:"command" jsonschema_description:"Its command line."`
	RunID   string `json:"run_id,omitempty" jsonschema_description:"Its run id, when workspace_exec started it (a foreground command in progress, or a background one of another sandbox generation)."`
}

// processListOutput is process_list's result.
type processListOutput struct {
	Meta
	Processes       []processInfo  `json:"processes" jsonschema_description:"Background processes started in this workspace's current sandbox, oldest first (the most recent ended ones are kept)."`
	Others          []otherProcess `json:"others,omitempty" jsonschema_description:"Other processes running in the sandbox that process_output cannot follow: foreground workspace_exec commands in progress, and anything not started through these tools."`
	OthersTruncated bool           `json:"others_truncated,omitempty" jsonschema_description:"True when others was cut at 100 entries."`
}

// ProcessList is the process_list tool: the background processes of the
// workspace, with their status.
func ProcessList(d *Deps) Tool {
	return define(d, spec[processListInput, processListOutput]{
		name:  "process_list",
		title: "List background processes",
		description: "List the processes started with workspace_exec background: true in this workspace's current sandbox: handle, pid, command, status, exit_code, start time and log path. " +
			"Also lists other processes running in the sandbox (foreground commands in progress, anything else) under others. Use it to find a handle you lost or to check what is still running.",
		toolset:     ToolsetProcess,
		annotations: Annotations{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false},
		run:         runProcessList,
	})
}

func runProcessList(ctx context.Context, c *Call, _ *processListInput) (*processListOutput, error) {
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	live, err := lease.Client.List(ctx)
	if err != nil {
		return nil, c.Check(err)
	}
	out := &processListOutput{Processes: []processInfo{}}
	known := map[uint32]bool{}
	for _, e := range c.d.procs.list(c.ws.Key, lease.Generation) {
		if end, ended := e.state(); !ended || !end.lostContact {
			known[e.pid] = true
		}
	}
	slices.SortFunc(live, func(a, b client.ProcessInfo) int { return int(a.Pid) - int(b.Pid) })
	for _, p := range live {
		kind, runID, tagged := parseProcessTag(p.Tag)
		switch {
		case known[p.Pid]:
			continue
		case tagged && kind == tagBg:
			// Started here but not followed (a server restart): follow it again.
			if run, _ := parseHandle(runID); run.gen == lease.Generation {
				ref := handleRef{gen: run.gen, pid: p.Pid}
				e := c.d.procs.find(c.ws.Key, ref)
				if e != nil {
					if end, ended := e.state(); !ended || !end.lostContact {
						continue // followed again meanwhile
					}
				}
				if _, err := adoptProcess(ctx, c, lease, ref, e, live); err == nil {
					continue
				} else if isLost(err) {
					return nil, err
				}
			}
		}
		if len(out.Others) >= maxOtherProcesses {
			out.OthersTruncated = true
			continue
		}
		o := otherProcess{Pid: p.Pid, Command: shellQuoteArgs(append([]string{p.Cmd}, p.Args...))}
		switch {
		case tagged && kind == tagFg:
			o.RunID = runID
			if len(p.Args) == 2 && (p.Args[0] == "-lc" || p.Args[0] == "-c") {
				o.Command = p.Args[1]
			}
		case tagged && kind == tagBg:
			o.RunID = runID
			if cmd := describeBackgroundArgs(p.Args); cmd != "" {
				o.Command = cmd
			}
		}
		out.Others = append(out.Others, o)
	}
	for _, e := range c.d.procs.list(c.ws.Key, lease.Generation) {
		end, _ := e.state()
		info := processInfo{
			Process:       e.handle,
			Pid:           e.pid,
			RunID:         e.runID,
			Command:       e.command,
			processStatus: statusOf(end),
			Log:           e.logRel,
		}
		if !e.startedAt.IsZero() {
			info.StartedAt = e.startedAt.UTC().Format(time.RFC3339)
		}
		if !end.endedAt.IsZero() {
			info.EndedAt = end.endedAt.UTC().Format(time.RFC3339)
		}
		out.Processes = append(out.Processes, info)
	}
	return out, nil
}

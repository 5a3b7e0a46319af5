package tools

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// maxEndedProcesses bounds the ended processes a workspace remembers; the
// oldest are forgotten first (their logs stay in the sandbox).
const maxEndedProcesses = 200

// Process statuses, as the model sees them.
const (
	statusRunning = "running"
	statusExited  = "exited"
	statusKilled  = "killed"
	statusUnknown = "unknown"
)

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

// newProcEntry returns the entry of background process pid of run runID in
// generation gen: its log is in the run's directory below the workspace
// root.
func newProcEntry(root string, gen int64, pid uint32, runID string) *procEntry {
	runDir := path.Join(root, runsDir, runID)
	return &procEntry{
		handle:    formatProcessHandle(gen, pid),
		gen:       gen,
		pid:       pid,
		runID:     runID,
		logAbs:    path.Join(runDir, outputLogName),
		logRel:    path.Join(runsDir, runID, outputLogName),
		runDirAbs: runDir,
		done:      make(chan struct{}),
	}
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

// followed reports whether the server follows the process or saw it end:
// false once the stream that followed it broke (a later lookup re-attaches).
func (e *procEntry) followed() bool {
	end, ended := e.state()
	return !ended || !end.lostContact
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
func endFromResult(res *envdclient.Result, err error) procEnd {
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
func (r *processRegistry) add(key string, e *procEntry, h *envdclient.Handle) {
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

// startedBy says where the processes the process tools serve come from, in
// their descriptions: workspace_exec with background: true when the server
// offers it, else only "in the background in this workspace".
func startedBy(d *Deps) string {
	if d.Config.hasToolset(ToolsetExec) && !d.Config.ReadOnly {
		return "started with workspace_exec background: true"
	}
	return "started in the background in this workspace"
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

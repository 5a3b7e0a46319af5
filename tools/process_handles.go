package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
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

// Process tags mark what the tools started, so process_list can tell them
// from everything else envd runs: "smcp:bg:<run_id>:<random>" for a
// background process, "smcp:fg:<run_id>:<random>" for a foreground run. The
// random part keeps tags unique across server restarts (the client kills an
// abandoned run by tag before its pid is known).
const (
	tagPrefix = "smcp:"
	tagFg     = "fg"
	tagBg     = "bg"
)

func newProcessTag(kind, runID string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return tagPrefix + kind + ":" + runID + ":" + hex.EncodeToString(b[:])
}

// parseProcessTag returns the kind and run id of a tag the tools made.
func parseProcessTag(tag string) (kind, runID string, ok bool) {
	rest, ok := strings.CutPrefix(tag, tagPrefix)
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 || (parts[0] != tagFg && parts[0] != tagBg) {
		return "", "", false
	}
	if ref, ok := parseHandle(parts[1]); !ok || ref.run == 0 {
		return "", "", false
	}
	return parts[0], parts[1], true
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
	if e != nil && e.followed() {
		return e, lease, nil
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
func adoptProcess(ctx context.Context, c *Call, lease *manage.Lease, ref handleRef, known *procEntry, live []envdclient.ProcessInfo) (*procEntry, error) {
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
	running, liveRun := liveBackground(live, pid, runID)
	if running != nil {
		pid, runID = running.Pid, liveRun
	}
	var err error
	if running == nil && runID == "" {
		if runID, err = runOfHandleLink(ctx, c, cli, runsAbs, gen, pid); err != nil {
			return nil, err
		}
	}
	if running == nil && pid == 0 {
		if pid, err = pidOfRun(ctx, c, cli, runsAbs, gen, runID); err != nil {
			return nil, err
		}
	}
	e := newProcEntry(lease.Sandbox.Workdir, gen, pid, runID)
	if known != nil {
		e.command, e.startedAt, e.timeout = known.command, known.startedAt, known.timeout
	}
	if running != nil {
		if e.command == "" {
			e.command = describeBackgroundArgs(running.Args)
		}
		h, err := cli.Connect(ctx, envdclient.ByPid(pid), envdclient.RunOptions{StdoutLimit: -1, StderrLimit: -1})
		if err == nil {
			c.d.procs.add(c.ws.Key, e, h)
			return e, nil
		}
		if !envdclient.IsNotFound(err) {
			return nil, c.Check(err)
		}
		// It ended between the list and the attach.
	}
	c.d.procs.add(c.ws.Key, e, nil)
	c.d.procs.finish(c.ws.Key, e, procEnd{status: statusUnknown, endedAt: time.Now(), detail: unknownEndDetail(known)})
	return e, nil
}

// liveBackground returns the background process in live that is pid (or,
// when pid is 0, the one of run runID), and its run id; a known runID must
// match. It returns nil when there is none.
func liveBackground(live []envdclient.ProcessInfo, pid uint32, runID string) (*envdclient.ProcessInfo, string) {
	for i, p := range live {
		kind, tagRun, ok := parseProcessTag(p.Tag)
		if ok && kind == tagBg && (p.Pid == pid || pid == 0 && tagRun == runID) && (runID == "" || tagRun == runID) {
			return &live[i], tagRun
		}
	}
	return nil, ""
}

// runOfHandleLink reads the run id of process pid from the symlink its
// start left in the runs directory runsAbs.
func runOfHandleLink(ctx context.Context, c *Call, cli *envdclient.Client, runsAbs string, gen int64, pid uint32) (string, error) {
	handle := formatProcessHandle(gen, pid)
	ent, err := cli.Stat(ctx, path.Join(runsAbs, handle))
	if envdclient.IsNotFound(err) {
		return "", processNotFound(handle)
	}
	if err != nil {
		return "", c.Check(err)
	}
	target, ok := parseHandle(path.Base(ent.SymlinkTarget))
	if ent.Type != envdclient.TypeSymlink || !ok || target.run == 0 || target.gen != gen {
		return "", processNotFound(handle)
	}
	return path.Base(ent.SymlinkTarget), nil
}

// pidOfRun finds the pid of the background process of run runID among the
// handle symlinks in the runs directory runsAbs.
func pidOfRun(ctx context.Context, c *Call, cli *envdclient.Client, runsAbs string, gen int64, runID string) (uint32, error) {
	entries, err := cli.ListDir(ctx, runsAbs, 1)
	if err != nil && !envdclient.IsNotFound(err) {
		return 0, c.Check(err)
	}
	var pid uint32
	for _, e := range entries {
		if h, ok := parseHandle(e.Name); ok && h.pid != 0 && h.gen == gen &&
			e.Type == envdclient.TypeSymlink && path.Base(e.SymlinkTarget) == runID {
			pid = h.pid
		}
	}
	if pid == 0 {
		return 0, connect.NewError(connect.CodeNotFound, fmt.Errorf(
			"no background process has run id %s in this workspace (a foreground run keeps its logs in %s/%s)", runID, runsDir, runID))
	}
	return pid, nil
}

// unknownEndDetail says why the end of a process that is no longer running
// is unknown; known is its entry before, if any.
func unknownEndDetail(known *procEntry) string {
	if known != nil {
		if end, _ := known.state(); end.detail != "" {
			return end.detail + "; it is no longer running"
		}
	}
	return "the process is not running, and how it ended is unknown: it ended while this server was not following it (for example across a server restart)"
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

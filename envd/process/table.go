//go:build linux

package process

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
)

// Default TableOptions values.
const (
	DefaultGrace     = 200 * time.Millisecond
	DefaultRetention = 30 * time.Second
)

// Errors returned by Table methods; test with errors.Is.
var (
	// ErrNotFound: no process has the pid or tag asked for.
	ErrNotFound = errors.New("process not found")
	// ErrExecutableNotFound: the command is not an executable file in PATH
	// (or, for a path, does not exist).
	ErrExecutableNotFound = errors.New("executable file not found")
	// ErrClosed: the table was closed and starts no more processes.
	ErrClosed = errors.New("process table is closed")
)

// notFoundError is ErrNotFound with a message naming the pid or tag.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string        { return e.msg }
func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }

// TableOptions configures NewTable. The zero value gives the defaults.
type TableOptions struct {
	// Grace bounds how long the End of a process that has exited waits for
	// its output pipes to reach EOF, which a backgrounded grandchild holding
	// them open would delay indefinitely (compare exec.Cmd.WaitDelay).
	// Output already in the pipes when the process exited is delivered
	// regardless. Zero means DefaultGrace.
	Grace time.Duration
	// Retention is how long an ended process can still be found by Get and
	// GetTagged (so a late subscriber learns its End). Zero means
	// DefaultRetention; negative means ended processes are dropped at once.
	Retention time.Duration
}

// Table starts processes and keeps them by pid and tag. It is safe for
// concurrent use.
type Table struct {
	grace     time.Duration
	retention time.Duration

	mu     sync.Mutex
	procs  map[int]*Process // live and retained ended processes
	seq    uint64
	closed bool

	// grownPipes counts the output pipes grown to bulkPipeSize and not yet
	// closed (at most maxGrownPipes).
	grownPipes atomic.Int32
}

// NewTable returns an empty Table.
func NewTable(opts TableOptions) *Table {
	t := &Table{grace: opts.Grace, retention: opts.Retention, procs: map[int]*Process{}}
	if t.grace <= 0 {
		t.grace = DefaultGrace
	}
	if t.retention == 0 {
		t.retention = DefaultRetention
	}
	return t
}

// Start spawns the process spec describes, in its own process group, and
// returns it together with a Subscription that sees all of its output from
// the first byte (Close the Subscription if it is not wanted). The command is
// run directly, not through a shell. Start fails with ErrExecutableNotFound
// when the command cannot be found, and with ErrClosed after Close.
func (t *Table) Start(spec Spec) (*Process, *Subscription, error) {
	if t.isClosed() {
		return nil, nil, ErrClosed
	}
	if spec.Cmd == "" {
		return nil, nil, errors.New("empty command")
	}
	path, err := lookPath(spec.Cmd, spec.Env, spec.Dir)
	if err != nil {
		return nil, nil, err
	}
	env := spec.Env
	if env == nil {
		env = []string{} // nil would inherit the daemon's environment
	}
	cmd := &exec.Cmd{
		Path: path,
		Args: append([]string{spec.Cmd}, spec.Args...),
		Env:  env,
		Dir:  spec.Dir,
	}
	p := &Process{
		spec:        spec,
		table:       t,
		cmd:         cmd,
		done:        make(chan struct{}),
		readersDone: make(chan struct{}),
		writeTurn:   make(chan struct{}, 1),
	}

	// parentEnds are ours to keep; childEnds are closed once the child has
	// its copies. On failure everything is closed.
	var parentEnds, childEnds []*os.File
	fail := func(err error) (*Process, *Subscription, error) {
		for _, f := range append(parentEnds, childEnds...) {
			_ = f.Close()
		}
		return nil, nil, err
	}
	if spec.PTY != nil {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return fail(fmt.Errorf("open pty: %w", err))
		}
		parentEnds = append(parentEnds, ptmx)
		childEnds = append(childEnds, tty)
		if err := setSize(ptmx, *spec.PTY); err != nil {
			return fail(fmt.Errorf("set pty size: %w", err))
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		// A new session with the terminal as controlling tty; the session
		// leader also leads a new process group (Setpgid would fail here).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: spec.Credential}
		p.ptmx = ptmx
		r, err := newReader(p, ptmx, PTY)
		if err != nil {
			return fail(err)
		}
		p.readers = []*reader{r}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: spec.Credential}
		for _, s := range []Stream{Stdout, Stderr} {
			pr, pw, err := os.Pipe()
			if err != nil {
				return fail(fmt.Errorf("create %s pipe: %w", s, err))
			}
			parentEnds = append(parentEnds, pr)
			childEnds = append(childEnds, pw)
			if s == Stdout {
				cmd.Stdout = pw
			} else {
				cmd.Stderr = pw
			}
			r, err := newReader(p, pr, s)
			if err != nil {
				return fail(err)
			}
			p.readers = append(p.readers, r)
		}
		if spec.Stdin {
			pr, pw, err := os.Pipe()
			if err != nil {
				return fail(fmt.Errorf("create stdin pipe: %w", err))
			}
			parentEnds = append(parentEnds, pw)
			childEnds = append(childEnds, pr)
			cmd.Stdin = pr
			p.stdin = pw
		}
	}

	sub := p.Subscribe()
	if err := cmd.Start(); err != nil {
		return fail(startError(spec.Cmd, err))
	}
	for _, f := range childEnds {
		_ = f.Close()
	}
	p.pid = cmd.Process.Pid
	p.readersLeft = len(p.readers)
	if spec.Timeout > 0 {
		p.deadline = time.AfterFunc(spec.Timeout, p.killAtDeadline)
	}

	t.mu.Lock()
	t.seq++
	p.seq = t.seq
	t.procs[p.pid] = p
	closed := t.closed
	t.mu.Unlock()
	if closed {
		p.kill() // Close ran while we were spawning
	}

	for _, r := range p.readers {
		go r.run()
	}
	go p.wait()
	return p, sub, nil
}

// Get returns the process with the given pid: a live one, or, with
// withEnded, also an ended one within the retention period. It fails with
// ErrNotFound.
func (t *Table) Get(pid int, withEnded bool) (*Process, error) {
	t.mu.Lock()
	p := t.procs[pid]
	t.mu.Unlock()
	if p == nil || (!withEnded && p.Ended()) {
		return nil, &notFoundError{fmt.Sprintf("process with pid %d not found", pid)}
	}
	return p, nil
}

// GetTagged returns the process with the given tag. When several share the
// tag it returns the newest live one, or, with withEnded and none live, the
// newest ended one within the retention period. It fails with ErrNotFound.
func (t *Table) GetTagged(tag string, withEnded bool) (*Process, error) {
	t.mu.Lock()
	var best *Process
	bestLive := false
	for _, p := range t.procs {
		if p.spec.Tag != tag {
			continue
		}
		live := !p.Ended()
		if !live && !withEnded {
			continue
		}
		if best == nil || (live && !bestLive) || (live == bestLive && p.seq > best.seq) {
			best, bestLive = p, live
		}
	}
	t.mu.Unlock()
	if best == nil {
		return nil, &notFoundError{fmt.Sprintf("process with tag '%s' not found", tag)}
	}
	return best, nil
}

// List returns the live processes (those whose End has not gone out), oldest
// first.
func (t *Table) List() []*Process {
	t.mu.Lock()
	list := make([]*Process, 0, len(t.procs))
	for _, p := range t.procs {
		if !p.Ended() {
			list = append(list, p)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(list, func(a, b *Process) int { return cmp.Compare(a.seq, b.seq) })
	return list
}

// Close kills with SIGKILL the process group of every live process, and of
// every ended one whose output is still held open by background children;
// Ends still go out to subscribers. Later Starts fail with ErrClosed. Close
// does not wait for the processes to end; calling it again is harmless.
func (t *Table) Close() {
	t.mu.Lock()
	t.closed = true
	procs := make([]*Process, 0, len(t.procs))
	for _, p := range t.procs {
		procs = append(procs, p)
	}
	t.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
}

func (t *Table) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// retire forgets p after the retention period.
func (t *Table) retire(p *Process) {
	forget := func() {
		t.mu.Lock()
		if t.procs[p.pid] == p {
			delete(t.procs, p.pid)
		}
		t.mu.Unlock()
	}
	if t.retention < 0 {
		forget()
		return
	}
	time.AfterFunc(t.retention, forget)
}

// lookPath finds file in the PATH of env (not the daemon's), as a shell
// would. A name with a slash is used as it is; relative PATH entries and
// relative paths are relative to dir.
func lookPath(file string, env []string, dir string) (string, error) {
	if strings.Contains(file, "/") {
		path := file
		if !filepath.IsAbs(path) && dir != "" {
			path = filepath.Join(dir, path)
		}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: %s", ErrExecutableNotFound, file)
		}
		return file, nil
	}
	var pathList string
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			pathList = v
			break
		}
	}
	for _, d := range filepath.SplitList(pathList) {
		if d == "" {
			d = "."
		}
		path := filepath.Join(d, file)
		if !filepath.IsAbs(path) {
			if dir == "" {
				path = "./" + path
			} else {
				path = filepath.Join(dir, path)
			}
		}
		if isExecutable(path) {
			return path, nil
		}
	}
	return "", fmt.Errorf("%w: %s", ErrExecutableNotFound, file)
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}

// startError turns an exec error into "start 'cmd': <reason>", keeping the
// errno for errors.Is (fs.ErrNotExist, fs.ErrPermission).
func startError(cmd string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, syscall.EAGAIN) {
		// fork's EAGAIN: the sandbox's process (task) limit is full.
		return fmt.Errorf("start '%s': the sandbox's process limit is reached (%w); end some of its processes first", cmd, err)
	}
	return fmt.Errorf("start '%s': %w", cmd, err)
}

func setSize(f *os.File, s Size) error {
	return pty.Setsize(f, &pty.Winsize{Cols: s.Cols, Rows: s.Rows})
}

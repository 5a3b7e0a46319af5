//go:build linux

// Package process spawns and tracks the processes envd runs for clients.
//
// A [Table] starts processes from a [Spec] (directly, without a shell, each in
// its own process group, on pipes or on a pseudo-terminal), keeps them by pid
// and tag, fans their output out to [Subscription]s, feeds their input,
// signals them, kills them at a deadline, and remembers ended ones for a while
// so a late subscriber still learns how they ended.
//
// The package knows nothing of RPC: envd/processrpc maps it onto the Connect
// process.Process service.
//
// Output semantics follow E2B's envd: output is read in chunks and delivered
// to every current subscriber; output produced while nobody is subscribed is
// discarded, not buffered. Chunks are larger than envd's 32 KiB under bulk
// output (up to [MaxChunkSize]). A slow subscriber
// slows the process down (bounded buffers, then the pipe fills); a subscriber
// that went away never does.
package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Config is the command as the client described it. The table spawns
// Config.Cmd with Config.Args; Config.Envs and Config.Cwd are not used for
// spawning (Spec.Env and Spec.Dir are their resolved forms) but are kept so
// that listings can report what was asked for.
type Config struct {
	// Cmd is the executable: a path containing a slash (relative paths are
	// relative to Spec.Dir), or a name looked up in the PATH of Spec.Env.
	Cmd string
	// Args are the arguments after the command name.
	Args []string
	// Envs are the environment overrides the client sent.
	Envs map[string]string
	// Cwd is the working directory as the client sent it; nil when unset.
	Cwd *string
}

// Size is a terminal size in character cells.
type Size struct {
	Cols, Rows uint16
}

// Spec describes a process to start.
type Spec struct {
	Config
	// Env is the complete environment, "KEY=value" entries; for a repeated
	// key the last entry wins. Nothing else is inherited from the daemon.
	Env []string
	// Dir is the working directory, already resolved. Empty means the
	// daemon's own working directory.
	Dir string
	// Credential, when set, is the user and group the process runs as.
	Credential *syscall.Credential
	// PTY, when set, runs the process on a new pseudo-terminal of that size
	// as a session leader with the terminal as its controlling tty. Output
	// then arrives as [PTY] chunks and input goes through WritePTY.
	PTY *Size
	// Stdin asks for a stdin pipe (WriteStdinContext, CloseStdin). Without
	// it stdin is /dev/null. Ignored with PTY.
	Stdin bool
	// Tag is an optional name to find the process by. Tags need not be
	// unique.
	Tag string
	// Timeout, when positive, kills the whole process group with SIGKILL if
	// the process is still running that long after it started. The End then
	// reports DeadlineExceeded.
	Timeout time.Duration
	// TimeoutSource names where Timeout came from (a request header), for
	// messages about it. The table does not use it.
	TimeoutSource string
}

// End says how a process ended.
type End struct {
	// ExitCode is the exit status, or -1 when a signal killed the process.
	ExitCode int
	// Exited reports a normal exit (not killed by a signal).
	Exited bool
	// Status is the wait status in words: "exit status 1", "signal: killed".
	Status string
	// Error is the text of the wait error: empty after exit status 0, the
	// same as Status for non-zero exits and signal deaths.
	Error string
	// DeadlineExceeded reports that Spec.Timeout killed the process.
	DeadlineExceeded bool
}

// Errors returned by Process methods. They are wrapped with the process's
// pid; test with errors.Is.
var (
	// ErrStdinClosed: the process has no stdin pipe, or it was closed.
	ErrStdinClosed = errors.New("stdin not enabled or closed")
	// ErrTTY: a stdin operation on a process that runs on a pseudo-terminal.
	ErrTTY = errors.New("tty assigned to process")
	// ErrNoTTY: a terminal operation on a process without a pseudo-terminal.
	ErrNoTTY = errors.New("no tty assigned to process")
)

// Process is one spawned process. Its methods are safe for concurrent use.
type Process struct {
	spec  Spec
	pid   int
	seq   uint64 // start order within the table, for "newest"
	table *Table
	cmd   *exec.Cmd
	ptmx  *os.File // the terminal's controlling side; nil without PTY

	inMu  sync.Mutex
	stdin *os.File // nil when never opened or closed
	// writeTurn holds one token while a stdin write is in progress: writes
	// take turns, because the deadline that ends a write applies to the
	// whole pipe. A channel rather than a mutex, so that a writer whose
	// context ends can stop waiting for its turn.
	writeTurn chan struct{}

	readers     []*reader
	readersLeft int // guarded by mu
	readersDone chan struct{}

	// sendMu serialises deliveries to subscribers with the final hand-over
	// of the End, so no chunk can follow the End on any subscription.
	sendMu sync.Mutex
	snap   []*Subscription // reused snapshot of subs; guarded by sendMu

	mu          sync.Mutex
	subs        []*Subscription
	exited      bool // the main process was reaped
	deadlineHit bool
	deadline    *time.Timer
	ended       bool // End handed over; subs closed
	end         End
	done        chan struct{} // closed when ended
}

// Pid returns the process id. The process is also the leader of its process
// group, so the pid is the group id too.
func (p *Process) Pid() int { return p.pid }

// Spec returns the Spec the process was started from. The caller must not
// modify the slices and maps it shares.
func (p *Process) Spec() Spec { return p.spec }

// IsPTY reports whether the process runs on a pseudo-terminal.
func (p *Process) IsPTY() bool { return p.ptmx != nil }

// Done returns a channel that is closed once the process has ended and its
// End has been handed to every subscriber.
func (p *Process) Done() <-chan struct{} { return p.done }

// Ended reports whether Done is closed.
func (p *Process) Ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the process has ended and returns how.
func (p *Process) Wait() End {
	<-p.done
	return p.end
}

// Signal sends sig to the process's whole process group, so children and
// grandchildren get it too. Signalling a group that no longer exists is not
// an error. After the process has ended Signal does nothing, because its
// group id may since have been reused.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil
	}
	return p.signalGroupLocked(sig)
}

func (p *Process) signalGroupLocked(sig syscall.Signal) error {
	err := syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("signal process group %d: %w", p.pid, err)
	}
	return nil
}

// WriteStdinContext writes b to the process's stdin pipe. It blocks while
// the pipe is full, and while another write is in progress, until ctx ends:
// a process that does not read its input must not hold the caller forever.
// It then returns ctx's error, and some of b may have been written. It fails
// with ErrStdinClosed when the process has no stdin pipe or it was closed,
// and with ErrTTY for a PTY process.
func (p *Process) WriteStdinContext(ctx context.Context, b []byte) error {
	if p.ptmx != nil {
		return fmt.Errorf("%w with pid %d; send pty input instead", ErrTTY, p.pid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("write to stdin of process with pid %d: %w", p.pid, err)
	}
	p.inMu.Lock()
	f := p.stdin
	p.inMu.Unlock()
	if f == nil {
		return p.stdinClosed()
	}
	// Every write takes its turn, so the deadline below cuts only this one.
	select {
	case p.writeTurn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("write to stdin of process with pid %d: %w (an earlier write is still waiting for the process to read)", p.pid, ctx.Err())
	}
	defer func() { <-p.writeTurn }()
	if ctx.Done() != nil {
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			_ = f.SetWriteDeadline(time.Now())
			close(fired)
		})
		defer func() {
			// stop reports false once the func has started, not finished:
			// wait for its deadline to land before clearing it, or the next
			// writer would find the pipe's deadline already past.
			if !stop() {
				<-fired
				_ = f.SetWriteDeadline(time.Time{})
			}
		}()
	}
	if _, err := f.Write(b); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return p.stdinClosed()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil {
			return fmt.Errorf("write to stdin of process with pid %d: %w (the process is not reading its input)", p.pid, ctx.Err())
		}
		return fmt.Errorf("write to stdin of process with pid %d: %w", p.pid, err)
	}
	return nil
}

func (p *Process) stdinClosed() error {
	return fmt.Errorf("%w for process with pid %d", ErrStdinClosed, p.pid)
}

// CloseStdin closes the stdin pipe, so the process reads EOF. Closing a pipe
// that is already closed, or was never opened, is a no-op. A PTY process has
// no stdin pipe: CloseStdin fails with ErrTTY (send Ctrl+D instead).
func (p *Process) CloseStdin() error {
	if p.ptmx != nil {
		return fmt.Errorf("%w with pid %d; send Ctrl+D (0x04) instead", ErrTTY, p.pid)
	}
	p.closeStdin()
	return nil
}

func (p *Process) closeStdin() {
	p.inMu.Lock()
	f := p.stdin
	p.stdin = nil
	p.inMu.Unlock()
	if f != nil {
		_ = f.Close() // a concurrent Write returns os.ErrClosed
	}
}

// WritePTY writes b to the pseudo-terminal, as if typed. It fails with
// ErrNoTTY for a process without one.
func (p *Process) WritePTY(b []byte) error {
	if p.ptmx == nil {
		return fmt.Errorf("%w with pid %d; send stdin input instead", ErrNoTTY, p.pid)
	}
	if _, err := p.ptmx.Write(b); err != nil {
		return fmt.Errorf("write to tty of process with pid %d: %w", p.pid, err)
	}
	return nil
}

// Resize sets the pseudo-terminal's size (the process gets SIGWINCH). It
// fails with ErrNoTTY for a process without one.
func (p *Process) Resize(size Size) error {
	if p.ptmx == nil {
		return fmt.Errorf("%w with pid %d; only pty processes can be resized", ErrNoTTY, p.pid)
	}
	if err := setSize(p.ptmx, size); err != nil {
		return fmt.Errorf("resize tty of process with pid %d: %w", p.pid, err)
	}
	return nil
}

// Subscribe returns a Subscription to the process's output from now on and
// to its End. Subscribing to an ended process yields a Subscription whose
// Chunks channel is already closed. Close it when done.
func (p *Process) Subscribe() *Subscription {
	s := &Subscription{p: p, ch: make(chan *Chunk, subscriptionBuffer), gone: make(chan struct{})}
	p.mu.Lock()
	if p.ended {
		close(s.ch)
	} else {
		p.subs = append(p.subs, s)
	}
	p.mu.Unlock()
	return s
}

// killAtDeadline runs from the Spec.Timeout timer.
func (p *Process) killAtDeadline() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	p.deadlineHit = true
	_ = p.signalGroupLocked(syscall.SIGKILL)
}

// kill sends SIGKILL to the process group while it may still have members:
// the process has not been reaped, or something (a background child) still
// holds its output open. While any member remains, the kernel cannot reuse
// the group id, so the signal cannot hit a stranger.
func (p *Process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited || p.readersLeft > 0 {
		_ = p.signalGroupLocked(syscall.SIGKILL)
	}
}

// wait reaps the process, gives its output readers a chance to finish, then
// hands the End to the subscribers.
//
// Output ends when every writer of the pipes (or terminal) has closed it. A
// backgrounded grandchild (`sleep 100 &`) keeps them open, so once the
// process itself has exited, the End goes out after at most the table's grace
// period. Bytes already in a pipe when the process exited are still
// delivered first, however long a slow subscriber takes. After the End the
// readers keep draining (and discarding) until EOF, so a background server
// the user started on purpose is not killed by SIGPIPE.
func (p *Process) wait() {
	err := p.cmd.Wait()
	state := p.cmd.ProcessState

	p.mu.Lock()
	p.exited = true
	deadlineHit := p.deadlineHit
	if p.deadline != nil {
		p.deadline.Stop()
	}
	p.mu.Unlock()

	end := End{ExitCode: -1, Status: "unknown"}
	if state != nil {
		end.ExitCode = state.ExitCode()
		end.Exited = state.Exited()
		end.Status = state.String()
		end.DeadlineExceeded = deadlineHit && !state.Exited()
	}
	if err != nil {
		end.Error = err.Error()
	}

	grace := time.NewTimer(p.table.grace)
	for _, r := range p.readers {
		r.processExited()
	}
	for _, r := range p.readers {
		<-r.caughtUp
	}
	select {
	case <-p.readersDone:
	case <-grace.C:
	}
	grace.Stop()
	p.finish(end)
}

func (p *Process) finish(end End) {
	p.table.retire(p) // first, so that without retention no lookup finds it once ended
	p.sendMu.Lock()
	p.mu.Lock()
	p.end = end
	p.ended = true
	subs := p.subs
	p.subs = nil
	p.mu.Unlock()
	for _, s := range subs {
		close(s.ch)
	}
	close(p.done)
	p.sendMu.Unlock()

	p.closeStdin()
}

// readerFinished is called by each output reader at EOF.
func (p *Process) readerFinished() {
	p.mu.Lock()
	p.readersLeft--
	last := p.readersLeft == 0
	p.mu.Unlock()
	if last {
		close(p.readersDone)
	}
}

// deliver hands c to every current subscriber. It reports false when nobody
// took it (no subscribers, or the End was already handed over), in which case
// c is the caller's to reuse.
func (p *Process) deliver(c *Chunk) bool {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	p.mu.Lock()
	if p.ended || len(p.subs) == 0 {
		p.mu.Unlock()
		return false
	}
	p.snap = append(p.snap[:0], p.subs...)
	p.mu.Unlock()

	c.refs.Store(int32(len(p.snap)))
	for i, s := range p.snap {
		p.snap[i] = nil
		select {
		case <-s.gone:
			c.Release()
			continue
		default:
		}
		select {
		case s.ch <- c:
		case <-s.gone:
			c.Release()
		}
	}
	return true
}

//go:build linux

package process

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Output is read in chunks of two sizes. A stream starts with small chunks,
// so a process that prints a line now and then holds little memory; once a
// read fills a small chunk (more output was waiting), the reader switches to
// large chunks, and back once a read fits a small one again. Bulk output so
// costs one read, one hand-off and one data event per large chunk instead of
// per 32 KiB.
const (
	// SmallChunkSize is the size of the chunks a stream starts with (32
	// KiB, E2B envd's read size).
	SmallChunkSize = 32 << 10
	// MaxChunkSize is the most output bytes one Chunk carries (256 KiB): the
	// largest data event, about 350 KB as JSON. E2B's JS SDK (connect-es)
	// and connect-go clients accept messages of up to 4 GiB by default,
	// gRPC clients up to 4 MiB.
	MaxChunkSize = 256 << 10
)

// bulkPipeSize is the capacity a stdout or stderr pipe is grown to once a
// read finds it full (1 MiB, Linux's default pipe-max-size), so a fast
// writer blocks less often and reads can fill large chunks: a 64 KiB pipe
// never yields more than 64 KiB per read. Pipes that never fill keep the
// default 64 KiB.
const bulkPipeSize = 1 << 20

// maxGrownPipes bounds how many pipes of a Table are grown at a time (16, so
// 16 MiB of pipe capacity). Pipe capacity counts against a per-user
// allowance (pipe-user-pages-soft, 64 MiB by default); an unprivileged user
// beyond it gets tiny new pipes, for every process of that user, so the
// daemon takes at most a quarter of it.
const maxGrownPipes = 16

// subscriptionBuffer is how many chunks a subscriber may fall behind before it
// slows the process down: with large chunks up to 1 MiB. A variable for
// tests.
var subscriptionBuffer = 4

// Stream names the output a Chunk was read from.
type Stream uint8

// The output streams.
const (
	Stdout Stream = iota + 1
	Stderr
	PTY
)

func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	case PTY:
		return "pty"
	}
	return "unknown"
}

// Chunk is one read of process output. One Chunk is shared by every
// subscriber it was delivered to, and its buffer is recycled once all of them
// have released it.
type Chunk struct {
	// Stream is where the bytes came from.
	Stream Stream
	n      int
	refs   atomic.Int32
	buf    []byte // SmallChunkSize or MaxChunkSize bytes
}

// Bytes returns the output. It is valid until Release.
func (c *Chunk) Bytes() []byte { return c.buf[:c.n] }

// Release gives the chunk back. Call it exactly once for every chunk received
// from a Subscription, after the last use of Bytes.
func (c *Chunk) Release() {
	if c.refs.Add(-1) == 0 {
		c.recycle()
	}
}

// Chunks are recycled by size: each pool holds chunks of one size.
var (
	smallChunks = sync.Pool{New: func() any { return &Chunk{buf: make([]byte, SmallChunkSize)} }}
	largeChunks = sync.Pool{New: func() any { return &Chunk{buf: make([]byte, MaxChunkSize)} }}
)

func newChunk(s Stream, large bool) *Chunk {
	pool := &smallChunks
	if large {
		pool = &largeChunks
	}
	c := pool.Get().(*Chunk)
	c.Stream = s
	c.n = 0
	return c
}

func (c *Chunk) recycle() {
	if len(c.buf) == MaxChunkSize {
		largeChunks.Put(c)
	} else {
		smallChunks.Put(c)
	}
}

// Subscription receives a process's output chunks and, after the last one,
// its End. It is safe for concurrent use, but Chunks is meant for one reader.
type Subscription struct {
	p    *Process
	ch   chan *Chunk
	gone chan struct{}
	once sync.Once
}

// Chunks returns the channel of output chunks. The channel is closed after
// the last chunk, when the process has ended; End is then available. Release
// every chunk received.
func (s *Subscription) Chunks() <-chan *Chunk { return s.ch }

// End blocks until the process has ended and returns how. Once Chunks is
// closed it returns at once.
func (s *Subscription) End() End { return s.p.Wait() }

// Close unsubscribes. Output is no longer held for this subscriber, so a
// subscriber that went away never blocks the process. Closing twice is a
// no-op.
func (s *Subscription) Close() {
	s.once.Do(func() {
		close(s.gone)
		p := s.p
		p.mu.Lock()
		for i, o := range p.subs {
			if o == s {
				p.subs = append(p.subs[:i], p.subs[i+1:]...)
				break
			}
		}
		p.mu.Unlock()
		for {
			select {
			case c, ok := <-s.ch:
				if !ok {
					return
				}
				c.Release()
			default:
				return
			}
		}
	})
}

// reader copies one output stream (stdout, stderr or the terminal) to the
// process's subscribers.
//
// Reads are non-blocking reads made under mu (through the file's RawConn), so
// that when the process exits, the bytes still waiting in the pipe can be
// counted exactly: the End must not overtake output the process wrote before
// exiting, however slow a subscriber is, yet it must not wait for output a
// backgrounded grandchild may or may not write later.
type reader struct {
	p      *Process
	f      *os.File
	rc     syscall.RawConn
	stream Stream
	cur    *Chunk // the chunk being filled; reader goroutine only
	readFn func(fd uintptr) bool
	n      int   // result of the last read; reader goroutine only
	err    error // result of the last read; reader goroutine only
	// pipeSize is the capacity of the pipe, 0 for a terminal or once
	// growing it was tried; grown tells that it was grown. Reader goroutine
	// only.
	pipeSize int
	grown    bool

	mu       sync.Mutex
	read     int64 // bytes read so far
	inFlight bool  // a chunk was read and is not yet delivered
	target   int64 // bytes to read before caught up; -1 while the process runs
	eof      bool
	caught   bool
	caughtUp chan struct{} // closed at EOF, or when target is reached
}

func newReader(p *Process, f *os.File, s Stream) (*reader, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &reader{p: p, f: f, rc: rc, stream: s, target: -1, caughtUp: make(chan struct{})}
	r.readFn = r.readOnce
	if s != PTY {
		_ = rc.Control(func(fd uintptr) { r.pipeSize = pipeCapacity(fd) })
	}
	return r, nil
}

// readOnce is the RawConn read callback: it returns false to wait for the
// file to become readable.
func (r *reader) readOnce(fd uintptr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		n, err := syscall.Read(int(fd), r.cur.buf[:])
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			return false
		}
		if n < 0 {
			n = 0
		}
		r.n, r.err = n, err
		if n > 0 {
			r.read += int64(n)
			r.inFlight = true
		}
		return true
	}
}

func (r *reader) run() {
	large := false
	r.cur = newChunk(r.stream, large)
	for {
		r.n, r.err = 0, nil
		if err := r.rc.Read(r.readFn); err != nil {
			break // the file was closed
		}
		if r.n > 0 {
			wantLarge := readLarge(r.n, len(r.cur.buf))
			if r.pipeSize > 0 && r.n >= r.pipeSize {
				r.growPipe()
			}
			r.cur.n = r.n
			if r.p.deliver(r.cur) {
				r.cur = newChunk(r.stream, wantLarge)
			} else if wantLarge != large {
				r.cur.recycle()
				r.cur = newChunk(r.stream, wantLarge)
			}
			large = wantLarge
			r.mu.Lock()
			r.inFlight = false
			r.checkLocked()
			r.mu.Unlock()
		}
		// n == 0 is EOF; a pseudo-terminal reports EIO once every holder of
		// its other side has closed it.
		if r.err != nil || r.n == 0 {
			break
		}
	}
	r.cur.recycle()
	r.cur = nil
	r.mu.Lock()
	r.eof = true
	r.markCaughtLocked()
	r.mu.Unlock()
	_ = r.f.Close()
	if r.grown {
		r.p.table.grownPipes.Add(-1)
	}
	r.p.readerFinished()
}

// readLarge tells whether the read after one of n bytes into a chunk of
// size bytes should go to a large chunk: a full chunk means more was
// waiting, so large chunks are read until a read fits a small one again.
func readLarge(n, size int) bool {
	return n == size || n > SmallChunkSize
}

// growPipe raises the pipe's capacity to bulkPipeSize, once: the pipe was
// full, so the writer is producing faster than one pipe's worth per read.
// When maxGrownPipes are grown already, or the kernel refuses (the per-user
// pipe limit), the pipe stays as it is.
func (r *reader) growPipe() {
	r.pipeSize = 0
	grown := &r.p.table.grownPipes
	if grown.Add(1) > maxGrownPipes {
		grown.Add(-1)
		return
	}
	_ = r.rc.Control(func(fd uintptr) { r.grown = growPipe(fd, bulkPipeSize) })
	if !r.grown {
		grown.Add(-1)
	}
}

// processExited fixes how many more bytes must be read before the End may go
// out: everything in the pipe at this moment. The main process has exited,
// so what it wrote is now either read or in the pipe.
func (r *reader) processExited() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.eof {
		return
	}
	var pending int
	_ = r.rc.Control(func(fd uintptr) { pending = pendingBytes(fd) })
	r.target = r.read + int64(pending)
	r.checkLocked()
}

func (r *reader) checkLocked() {
	if r.target >= 0 && !r.inFlight && r.read >= r.target {
		r.markCaughtLocked()
	}
}

func (r *reader) markCaughtLocked() {
	if !r.caught {
		r.caught = true
		close(r.caughtUp)
	}
}

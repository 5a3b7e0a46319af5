package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// DefaultMaxRequestMemory is the default of Config.MaxRequestMemory: room
// for five request bodies at the default --max-body-bytes at once.
const DefaultMaxRequestMemory = 512 << 20

// memoryWait is how long a request waits for room in the memory budget
// before it is refused with 503.
const memoryWait = time.Second

// memoryChunk is how much of the budget a body of unknown length (chunked)
// reserves at a time as it is read.
const memoryChunk = 1 << 20

// memoryBudget bounds the request bodies a server holds at once, summed over
// every principal and session: a request reserves its body's size (its
// Content-Length, or for a body of unknown length its bytes as they are
// read) before the body is read, and releases it when it has been answered.
//
// Fairness: when the server has more than one principal, no principal may
// hold more than half of the budget, so however many slow large uploads one
// principal keeps open, the other half stays for the others' calls. A
// request that does not fit waits up to memoryWait for releases, then is
// refused; it is never queued for longer. It is safe for concurrent use.
type memoryBudget struct {
	capacity int64 // 0: no budget
	share    int64 // the most one principal may hold
	wait     time.Duration
	// waiting, when set (tests), is called each time an acquire starts
	// waiting for room.
	waiting func()

	mu      sync.Mutex
	used    int64
	held    map[string]int64 // by principal
	changed chan struct{}    // closed and replaced when used changes
}

// newMemoryBudget returns a budget of capacity bytes (0: none) for a server
// with the given number of principals.
func newMemoryBudget(capacity int64, principals int) *memoryBudget {
	share := capacity
	if principals > 1 {
		share = capacity / 2
	}
	return &memoryBudget{capacity: capacity, share: share, wait: memoryWait, held: map[string]int64{}, changed: make(chan struct{})}
}

// budgetError is why a request was refused by the memory budget; it is the
// HTTP answer too.
type budgetError struct {
	status int    // 413 (never fits) or 503 (does not fit now)
	msg    string // names the flags
}

func (e *budgetError) Error() string { return e.msg }

// write answers the refused request: a JSON-RPC error with the HTTP status,
// and Retry-After on a 503.
func (e *budgetError) write(w http.ResponseWriter) {
	if e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(memoryWait/time.Second, 1))))
	}
	writeError(w, e.status, e.msg)
}

// acquire reserves n bytes for principal, waiting up to b.wait for room
// (not at all when wait is false). release gives them back; it may be
// called more than once.
func (b *memoryBudget) acquire(ctx context.Context, principal string, n int64, wait bool) (release func(), err error) {
	if b.capacity <= 0 {
		return func() {}, nil
	}
	if n > b.share {
		return nil, b.tooLarge(n)
	}
	var deadline <-chan time.Time
	for {
		b.mu.Lock()
		if b.used+n <= b.capacity && b.held[principal]+n <= b.share {
			b.used += n
			b.held[principal] += n
			b.signal()
			b.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { b.release(principal, n) }) }, nil
		}
		changed := b.changed
		heldByPrincipal := b.held[principal]
		b.mu.Unlock()
		if !wait {
			return nil, b.full(n, heldByPrincipal)
		}
		if deadline == nil {
			timer := time.NewTimer(b.wait)
			defer timer.Stop()
			deadline = timer.C
		}
		if b.waiting != nil {
			b.waiting()
		}
		select {
		case <-changed:
		case <-deadline:
			return nil, b.full(n, heldByPrincipal)
		case <-ctx.Done():
			return nil, b.full(n, heldByPrincipal)
		}
	}
}

func (b *memoryBudget) release(principal string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.held[principal] -= n; b.held[principal] == 0 {
		delete(b.held, principal)
	}
	b.signal()
}

// signal wakes the waiters. Called with mu held.
func (b *memoryBudget) signal() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// inUse is the bytes reserved now and a channel closed at the next change.
func (b *memoryBudget) inUse() (int64, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.changed
}

func (b *memoryBudget) tooLarge(n int64) *budgetError {
	if n > b.capacity {
		return &budgetError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(
			"request body of %d bytes is larger than the server's whole request memory budget (--max-request-memory %d bytes; --max-body-bytes allows bodies up to its own limit): send a smaller request, for example split the files over several put_files calls",
			n, b.capacity)}
	}
	return &budgetError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(
		"request body of %d bytes is larger than one principal's share of the server's request memory budget (half of --max-request-memory %d bytes, with --max-body-bytes above it): send a smaller request, for example split the files over several put_files calls",
		n, b.capacity)}
}

func (b *memoryBudget) full(n, held int64) *budgetError {
	return &budgetError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf(
		"the server's request memory budget is in use (--max-request-memory %d bytes over all clients; this client holds %d of them, at most %d): this request of %d bytes was refused before it ran; retry it after other calls finish, or split large uploads over several smaller calls",
		b.capacity, held, b.share, n)}
}

// budgetedBody reserves a body of unknown length in the budget as it is
// read, memoryChunk at a time; a read past what the budget allows fails
// with the *budgetError.
type budgetedBody struct {
	io.ReadCloser
	ctx       context.Context
	budget    *memoryBudget
	principal string
	read      int64
	reserved  int64
	releases  []func()
}

func (b *budgetedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	for b.read > b.reserved {
		release, rerr := b.budget.acquire(b.ctx, b.principal, memoryChunk, true)
		if rerr != nil {
			return n, rerr
		}
		b.releases = append(b.releases, release)
		b.reserved += memoryChunk
	}
	return n, err
}

// release gives back what the body reserved.
func (b *budgetedBody) release() {
	for _, r := range b.releases {
		r()
	}
}

// reserveMemory admits a POST only when its body fits in the memory budget
// (see memoryBudget), before the body is read: a body that never fits gets
// 413, one that does not fit now gets 503 with Retry-After, both naming
// --max-request-memory. The reservation lasts until the request has been
// answered (the call has run). Bodies larger than Config.MaxBodyBytes pass
// to limitBody, which refuses them.
func (s *Server) reserveMemory(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || s.budget.capacity <= 0 || r.ContentLength > s.cfg.MaxBodyBytes || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		principal, _ := principalFrom(r.Context())
		if r.ContentLength < 0 {
			body := &budgetedBody{ReadCloser: r.Body, ctx: r.Context(), budget: s.budget, principal: principal}
			defer body.release()
			r.Body = body
			next.ServeHTTP(w, r)
			return
		}
		release, err := s.budget.acquire(r.Context(), principal, r.ContentLength, true)
		if err != nil {
			var be *budgetError
			if errors.As(err, &be) {
				if be.status == http.StatusServiceUnavailable {
					s.metrics.memoryRefused()
				}
				be.write(w)
			}
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

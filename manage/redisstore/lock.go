package redisstore

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Scripts run atomically on the server: only the holder's token renews or
// deletes the lock.
var (
	renewScript  = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end`)
	unlockScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)
)

// Backoff bounds of a waiting Lock.
const (
	lockWaitMin = 5 * time.Millisecond
	lockWaitMax = 250 * time.Millisecond
)

// heldLock is one creation lock this process holds.
type heldLock struct {
	key, token string
	cancel     context.CancelCauseFunc
	stop       chan struct{}
	done       chan struct{}
	once       sync.Once
}

// Lock implements manage.Store (see the package comment). An unreachable
// Redis fails it at once with a clear error; a lock held elsewhere is waited
// for until ctx ends.
func (s *Store) Lock(ctx context.Context, key string) (context.Context, func(), error) {
	if err := s.checkOpen(); err != nil {
		return nil, nil, err
	}
	var b [16]byte
	_, _ = crand.Read(b[:])
	token := hex.EncodeToString(b[:])
	lk := s.lockKey(key)
	wait := lockWaitMin
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		cctx, cancel := s.cmdCtx(ctx)
		start := time.Now()
		ok, err := s.rdb.SetNX(cctx, lk, token, s.opts.LockExpiry).Result()
		cancel()
		if err != nil {
			return nil, nil, s.fault(ctx, "taking the creation lock", err)
		}
		if !ok {
			// A SET retried after its reply was lost finds its own token.
			cctx, cancel := s.cmdCtx(ctx)
			cur, gerr := s.rdb.Get(cctx, lk).Result()
			cancel()
			ok = gerr == nil && cur == token
		}
		if ok {
			return s.hold(key, token, start)
		}
		// Jittered: between half and all of wait.
		d := wait/2 + rand.N(wait/2+1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, lockWaitMax)
	}
}

// hold starts renewing a lock taken at start and returns its held context
// and unlock.
func (s *Store) hold(key, token string, start time.Time) (context.Context, func(), error) {
	held, cancel := context.WithCancelCause(context.Background())
	h := &heldLock{key: key, token: token, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel(errors.New("redis store is closed"))
		s.release(h)
		return nil, nil, errors.New("redis store is closed")
	}
	s.held[h] = struct{}{}
	s.mu.Unlock()
	go s.renew(h, start)
	return held, func() { s.unlock(h) }, nil
}

// renew extends h's expiry every third of LockExpiry until unlock. A renewal
// that finds another token (or none) loses the lock; so does going two
// thirds of LockExpiry without a successful renewal, since the lock may
// expire before the next one.
func (s *Store) renew(h *heldLock, validFrom time.Time) {
	defer close(h.done)
	expiry := s.opts.LockExpiry
	every := expiry / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), min(s.opts.CommandTimeout, every))
		n, err := renewScript.Run(ctx, s.rdb, []string{s.lockKey(h.key)}, h.token, expiry.Milliseconds()).Int()
		cancel()
		switch {
		case err == nil && n == 1:
			validFrom = start
		case err == nil:
			s.lose(h, fmt.Errorf("%w: workspace %q: its lock key in the redis store at %s expired or holds another holder's token", manage.ErrLockLost, h.key, s.addr))
			return
		case time.Since(validFrom) >= expiry-every:
			s.lose(h, fmt.Errorf("%w: workspace %q: not renewed for %s (the lock expires after %s): %v", manage.ErrLockLost, h.key, time.Since(validFrom).Round(time.Millisecond), expiry, s.fault(context.Background(), "renewing the creation lock", err)))
			return
		}
	}
}

// lose cancels h's held context with cause and forgets h (there is nothing
// to release: the lock key is not ours any more, or soon will not be).
func (s *Store) lose(h *heldLock, cause error) {
	s.log.Warn("lost a creation lock while holding it", "err", cause)
	h.cancel(cause)
	s.mu.Lock()
	delete(s.held, h)
	s.mu.Unlock()
}

// unlock stops h's renewal and releases it (only if it still holds the
// holder's token).
func (s *Store) unlock(h *heldLock) {
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		h.cancel(errors.New("creation lock released"))
		s.mu.Lock()
		_, mine := s.held[h]
		delete(s.held, h)
		s.mu.Unlock()
		if mine {
			s.release(h)
		}
	})
}

// release deletes h's lock key if it still holds h's token.
func (s *Store) release(h *heldLock) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommandTimeout)
	defer cancel()
	if err := unlockScript.Run(ctx, s.rdb, []string{s.lockKey(h.key)}, h.token).Err(); err != nil {
		s.log.Warn("could not release a creation lock; it expires by itself", "key", h.key, "expiry", s.opts.LockExpiry, "err", s.fault(context.Background(), "releasing the creation lock", err))
	}
}

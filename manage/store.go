package manage

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Record is what the Store keeps for one workspace key.
type Record struct {
	// Key is the workspace key.
	Key string `json:"key"`
	// Provider is the name of the provider that made the sandbox.
	Provider string `json:"provider"`
	// SandboxID is the provider's id of the workspace's sandbox.
	SandboxID string `json:"sandbox_id"`
	// Generation is the sandbox's generation.
	Generation int64 `json:"generation"`
	// State is the sandbox's state when the record was written.
	State State `json:"state"`
	// Named marks a workspace that survives sessions and restarts.
	Named bool `json:"named"`
	// CreatedAt is when the sandbox was created.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the record was written.
	UpdatedAt time.Time `json:"updated_at"`
	// PausedAt is when the sandbox was last paused or stopped (zero while
	// running); the reaper kills sandboxes paused longer than a TTL.
	PausedAt time.Time `json:"paused_at,omitzero"`
	// Recovered marks a record rebuilt from the provider's sandboxes after
	// the store file was found damaged, whose workspace has not been told
	// yet: the first operation on it carries EventStoreRebuilt (FilesKept),
	// and the record it then writes no longer has the mark.
	Recovered bool `json:"recovered,omitempty"`
	// LastActive is when a server last ran a call on the sandbox, as far as
	// the store knows: written when the sandbox is made, resumed or
	// reached, on a call at most once per activity interval (a quarter of
	// the idle pause, or DefaultActivityInterval), and every interval while
	// a call is in progress. Servers sharing the store read it before an
	// idle or end-of-session pause, so one does not pause a sandbox another
	// is serving.
	LastActive time.Time `json:"last_active,omitzero"`
	// ActiveBy names the server (its Manager) that wrote LastActive. A
	// server that lets go of a workspace it was the last to be active on
	// clears LastActive, so its activity does not keep the remaining
	// servers from pausing the sandbox once they leave too.
	ActiveBy string `json:"active_by,omitempty"`
}

// Store keeps workspace records beyond the life of the process; the server
// uses package manage/boltstore, a file that several servers on one state
// directory share, or manage/redisstore, which replicas on several hosts
// share. Implementations must be safe for concurrent use.
type Store interface {
	// Get returns the record for key; ok is false when there is none.
	Get(ctx context.Context, key string) (rec Record, ok bool, err error)
	// Put writes rec, replacing any record for rec.Key.
	Put(ctx context.Context, rec Record) error
	// Delete removes key's record; a missing record is not an error.
	Delete(ctx context.Context, key string) error
	// List returns every record.
	List(ctx context.Context) ([]Record, error)
	// Lock takes key's creation lock, held until unlock is called, so that
	// two replicas never create two sandboxes for one key. It waits until
	// the lock is free or ctx ends. held is done once the lock is no longer
	// held: after unlock, or when the store lost it while held (a Redis
	// lock whose expiry passed without renewal, or that another holder
	// took), in which case context.Cause(held) is an error wrapping
	// ErrLockLost. The Manager creates under held and records nothing it
	// made under a lost lock. unlock may be called more than once.
	Lock(ctx context.Context, key string) (held context.Context, unlock func(), err error)
	// ReserveSlot admits the creation of req.Key's sandbox when req.Owner
	// holds fewer than req.Max sandboxes, atomically against every server
	// sharing the store, so that replicas together never let an owner past
	// its limit. An owner holds the workspaces whose records hold a slot
	// (Record.HoldsSlot) and those with a reservation not yet released or
	// lapsed; a key it holds already (a reset, a replacement) is always
	// admitted. A full owner gets a *LimitError. release gives the
	// reservation back once the creation ended: the record written, when it
	// succeeded, holds the slot from then on, and one whose sandbox is gone
	// (killed, reaped, deleted) frees it. A reservation never released (its
	// server died) lapses after req.Expiry. release may be called more
	// than once.
	ReserveSlot(ctx context.Context, req SlotRequest) (release func(), err error)
	// Close releases the store.
	Close() error
}

// HoldsSlot reports whether rec counts against its owner's limit of
// sandboxes: it records a sandbox (running, paused or stopped) that is not
// gone.
func (r Record) HoldsSlot() bool { return r.SandboxID != "" && r.State != StateGone }

// SlotRequest asks Store.ReserveSlot for a sandbox slot.
type SlotRequest struct {
	// Key is the workspace about to get a sandbox.
	Key string
	// Owner is Key's owner (an HTTP principal).
	Owner string
	// Max is the most sandboxes Owner may hold.
	Max int
	// OwnerOf tells the owner of any workspace key, to count Owner's
	// records.
	OwnerOf func(key string) string
	// Expiry is how long the reservation lasts when it is never released.
	Expiry time.Duration
}

// SlotReservation is a slot reserved for a creation that has not ended, as
// a Store keeps it.
type SlotReservation struct {
	// Key and Owner are the request's.
	Key   string `json:"key"`
	Owner string `json:"owner"`
	// Token tells this reservation from a later one of the same key, so a
	// release never gives back another's.
	Token string `json:"token"`
	// Expires is when the reservation lapses unless released before.
	Expires time.Time `json:"expires"`
}

// CountSlots counts the slots req.Owner holds, for a Store that reads all
// its records and reservations in one transaction: the keys of its records
// that hold a slot and of its reservations that have not lapsed by now.
// mine tells whether req.Key is among them.
func CountSlots(req SlotRequest, recs []Record, reserved []SlotReservation, now time.Time) (held int, mine bool) {
	keys := map[string]bool{}
	for _, rec := range recs {
		if rec.HoldsSlot() && req.OwnerOf(rec.Key) == req.Owner {
			keys[rec.Key] = true
		}
	}
	for _, r := range reserved {
		if r.Owner == req.Owner && now.Before(r.Expires) {
			keys[r.Key] = true
		}
	}
	return len(keys), keys[req.Key]
}

// NewSlotToken returns a random SlotReservation.Token.
func NewSlotToken() string {
	var b [12]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ErrLockLost is the cause of a held lock's context when the store lost the
// lock while it was held.
var ErrLockLost = errors.New("creation lock lost")

// errUnlocked is the cause of a held lock's context after unlock.
var errUnlocked = errors.New("creation lock released")

// NewHeldContext returns the held context a Store's Lock hands out for a
// lock it can only lose by unlock (a lock of this process or of a file):
// release cancels it. Stores that can lose a lock cancel it with an error
// wrapping ErrLockLost themselves.
func NewHeldContext() (held context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	return ctx, func() { cancel(errUnlocked) }
}

// MemoryStore is a Store that lives in memory only: workspaces are not
// remembered across restarts. It is safe for concurrent use.
type MemoryStore struct {
	mu       sync.Mutex
	recs     map[string]Record
	locks    map[string]chan struct{}
	reserved map[string]SlotReservation // by key
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{recs: map[string]Record{}, locks: map[string]chan struct{}{}, reserved: map[string]SlotReservation{}}
}

// Get implements Store.
func (s *MemoryStore) Get(_ context.Context, key string) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[key]
	return r, ok, nil
}

// Put implements Store.
func (s *MemoryStore) Put(_ context.Context, rec Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[rec.Key] = rec
	return nil
}

// Delete implements Store.
func (s *MemoryStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recs, key)
	return nil
}

// List implements Store.
func (s *MemoryStore) List(context.Context) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Collect(maps.Values(s.recs))
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Lock implements Store.
func (s *MemoryStore) Lock(ctx context.Context, key string) (context.Context, func(), error) {
	for {
		s.mu.Lock()
		held, busy := s.locks[key]
		if !busy {
			ch := make(chan struct{})
			s.locks[key] = ch
			s.mu.Unlock()
			held, release := NewHeldContext()
			var once sync.Once
			return held, func() {
				once.Do(func() {
					release()
					s.mu.Lock()
					delete(s.locks, key)
					s.mu.Unlock()
					close(ch)
				})
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// ReserveSlot implements Store.
func (s *MemoryStore) ReserveSlot(_ context.Context, req SlotRequest) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for k, r := range s.reserved {
		if !now.Before(r.Expires) {
			delete(s.reserved, k)
		}
	}
	held, mine := CountSlots(req, slices.Collect(maps.Values(s.recs)), slices.Collect(maps.Values(s.reserved)), now)
	if !mine && held >= req.Max {
		return nil, &LimitError{Owner: req.Owner, Max: req.Max, Held: held}
	}
	r := SlotReservation{Key: req.Key, Owner: req.Owner, Token: NewSlotToken(), Expires: now.Add(req.Expiry)}
	s.reserved[req.Key] = r
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.reserved[r.Key].Token == r.Token {
				delete(s.reserved, r.Key)
			}
		})
	}, nil
}

// Close implements Store.
func (s *MemoryStore) Close() error { return nil }

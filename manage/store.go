package manage

import (
	"context"
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
	// Close releases the store.
	Close() error
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
	mu    sync.Mutex
	recs  map[string]Record
	locks map[string]chan struct{}
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{recs: map[string]Record{}, locks: map[string]chan struct{}{}}
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

// Close implements Store.
func (s *MemoryStore) Close() error { return nil }

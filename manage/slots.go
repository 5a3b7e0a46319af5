package manage

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"
)

// DefaultMaxSandboxesPerOwner is the command line's default of
// Options.MaxSandboxesPerOwner.
const DefaultMaxSandboxesPerOwner = 4

// slots bounds the sandboxes one owner (an HTTP principal) holds, so one
// tenant cannot fill the host with sandboxes. A workspace holds a slot from
// the moment its creation is admitted: the count is the owner's workspaces
// the store records with a sandbox (running, paused or stopped), together
// with the creations admitted in this process that have not yet recorded
// theirs. Admissions are serialised, so concurrent first calls never let
// one more through.
type slots struct {
	mu       sync.Mutex
	pending  map[string]map[string]int // owner → key → creations admitted, not yet done
	max      int
	owner    func(key string) string
	disabled bool
}

func newSlots(max int, owner func(string) string) *slots {
	return &slots{pending: map[string]map[string]int{}, max: max, owner: owner, disabled: max <= 0 || owner == nil}
}

// admit takes a slot for a creation of key's sandbox, or returns the error
// the model reads when its owner already holds max other workspaces'
// sandboxes. A key that holds a slot already (a reset, a replacement)
// is always admitted. done gives the pending claim back once the creation
// ended (its record, when it succeeded, then holds the slot).
func (s *slots) admit(ctx context.Context, m *Manager, key string) (done func(), err error) {
	if s.disabled {
		return func() {}, nil
	}
	owner := s.owner(key)
	if owner == "" {
		return func() {}, nil
	}
	m.recoverStore() // count the records a damaged store file lost
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, err := m.store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("workspace %q: counting its owner's sandboxes: %w", key, err)
	}
	held := map[string]bool{}
	for _, rec := range recs {
		if rec.SandboxID != "" && rec.State != StateGone && s.owner(rec.Key) == owner {
			held[rec.Key] = true
		}
	}
	for k := range s.pending[owner] {
		held[k] = true
	}
	if !held[key] && len(held) >= s.max {
		return nil, &LimitError{Owner: owner, Max: s.max, Held: len(held)}
	}
	if s.pending[owner] == nil {
		s.pending[owner] = map[string]int{}
	}
	s.pending[owner][key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.pending[owner][key]--; s.pending[owner][key] == 0 {
				delete(s.pending[owner], key)
			}
			if len(s.pending[owner]) == 0 {
				delete(s.pending, owner)
			}
		})
	}, nil
}

// LimitError reports that a new workspace's sandbox was not created because
// its owner already holds the most sandboxes the server allows one owner
// (Options.MaxSandboxesPerOwner). As a Connect FailedPrecondition error it
// reads to the model as something to fix before retrying.
type LimitError struct {
	// Owner is the principal whose sandboxes were counted.
	Owner string
	// Max is the limit and Held the sandboxes counted.
	Max, Held int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("no sandbox was created for this workspace: principal %q already has %d sandboxes, the server's limit per principal (--max-sandboxes-per-principal %d). "+
		"Use one of your existing workspaces instead, or free one: end an MCP session you no longer need (its anonymous sandbox is deleted), "+
		"or have the operator raise --max-sandboxes-per-principal (0 means no limit) or set --paused-ttl so that paused sandboxes are reaped", e.Owner, e.Held, e.Max)
}

// IsLimit reports whether err is a *LimitError.
func IsLimit(err error) bool {
	var le *LimitError
	return errors.As(err, &le)
}

// limitError wraps a *LimitError as the Connect error the tools render.
func limitError(le *LimitError) error {
	return connect.NewError(connect.CodeFailedPrecondition, le)
}

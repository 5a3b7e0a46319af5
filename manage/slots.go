package manage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
)

// DefaultMaxSandboxesPerOwner is the command line's default of
// Options.MaxSandboxesPerOwner.
const DefaultMaxSandboxesPerOwner = 4

// slots bounds the sandboxes one owner (an HTTP principal) holds, so one
// tenant cannot fill the host with sandboxes. A workspace holds a slot from
// the moment its creation is admitted: the store counts the owner's
// workspaces it records with a sandbox (running, paused or stopped),
// together with the creations admitted and not yet ended, by this server or
// any other sharing the store (Store.ReserveSlot). The store admits
// atomically, so concurrent first calls, on one replica or several, never
// let one more through.
type slots struct {
	max      int
	owner    func(key string) string
	disabled bool
}

func newSlots(max int, owner func(string) string) *slots {
	return &slots{max: max, owner: owner, disabled: max <= 0 || owner == nil}
}

// reservationExpiry is how long a slot reserved for a creation lasts when
// its server dies before releasing it: the creation's own bound
// (CreateTimeout) and the calls that record its sandbox (CallTimeout), with
// as much again to spare. Default 3 minutes.
func (m *Manager) reservationExpiry() time.Duration {
	return m.opts.CreateTimeout + 2*m.opts.CallTimeout
}

// admit takes a slot for a creation of key's sandbox, or returns the error
// the model reads when its owner already holds max other workspaces'
// sandboxes. A key that holds a slot already (a reset, a replacement)
// is always admitted. done gives the reservation back once the creation
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
	done, err = m.store.ReserveSlot(ctx, SlotRequest{Key: key, Owner: owner, Max: s.max, OwnerOf: s.owner, Expiry: m.reservationExpiry()})
	if err != nil {
		if IsLimit(err) {
			return nil, err
		}
		return nil, fmt.Errorf("workspace %q: counting its owner's sandboxes: %w", key, err)
	}
	return done, nil
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

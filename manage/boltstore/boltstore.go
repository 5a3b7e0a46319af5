// Package boltstore is the embedded manage.Store: one bbolt database file
// under the state directory.
//
// Why bbolt: it is pure Go (no cgo, quick to build), keeps everything in one
// file with ACID transactions and fsync on commit, and serialises access from
// several processes with a file lock. Records change only on lifecycle events
// (create, pause, resume, recreate), so the store opens the file for each
// operation and closes it again: several stdio servers sharing one state
// directory (Claude Desktop and an IDE, say) then take turns instead of the
// second one failing to start.
//
// Sandbox slots (manage.Store.ReserveSlot) are reserved in a second bucket
// by the same write transaction that counts the owner's records, which the
// file lock makes exclusive across processes: servers sharing the file
// never let an owner past its limit together. A reservation a process left
// when it died lapses at its expiry.
//
// Faults: a file still locked by another process after the lock timeout is a
// clear error naming the file; a corrupt file (empty ones included: a new
// file is made whole under a temporary name and linked into place, so it is
// never seen empty) is moved aside (kept for inspection, logged) and a fresh
// one started, so one bad file never stops the server, and Damages tells the
// Manager to rebuild the records from the provider's sandboxes. A truncated file, which bbolt would read past its end (a
// SIGBUS no recover catches), is found before it is mapped (check.go), and
// a fault on the mapping is made a panic of the goroutine, recovered as
// corruption. Sandboxes themselves are never touched by the store.
package boltstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/sandbox-mcp/sandbox-mcp/internal/atomicfile"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/filelock"
)

// FileName is the database file's name inside the state directory.
const FileName = "state.db"

// DefaultLockTimeout is how long an operation waits for another process
// holding the database file.
const DefaultLockTimeout = 5 * time.Second

var bucket = []byte("workspaces")

// slotBucket holds the slot reservations of creations not yet ended, as
// JSON manage.SlotReservation by workspace key.
var slotBucket = []byte("slots")

// Options configures Open. The zero value is usable.
type Options struct {
	// LockTimeout bounds the wait for another process holding the file.
	// Default DefaultLockTimeout.
	LockTimeout time.Duration
	// Logger receives notes about recovered files. Nil means slog.Default().
	Logger *slog.Logger
}

// Store is a manage.Store in a bbolt file. It is safe for concurrent use, by
// several goroutines and several processes.
type Store struct {
	path    string
	lockDir string
	timeout time.Duration
	log     *slog.Logger

	mu     sync.Mutex // serialises this process's own opens
	closed bool

	damages atomic.Uint64 // damaged files moved aside
}

var _ manage.Store = (*Store)(nil)

// Open prepares the store in dir (created if missing, mode 0700). It fails
// with a clear error when dir is not writable or the file stays locked; a
// corrupt file is moved aside and replaced.
func Open(dir string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	probe, err := os.CreateTemp(dir, ".write-probe-*")
	if err != nil {
		return nil, fmt.Errorf("state directory %s is not writable: %w", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	lockDir := filepath.Join(dir, "locks")
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	s := &Store{path: filepath.Join(dir, FileName), lockDir: lockDir, timeout: opts.LockTimeout, log: opts.Logger}
	if aside, err := os.ReadFile(s.pendingPath()); err == nil {
		// An earlier server replaced a damaged file and ended before its
		// rebuild was done: the damage still counts.
		s.damages.Store(1)
		s.log.Warn("the store file was replaced after damage and its rebuild never finished; rebuilding it again", "file", s.path, "damaged_file", strings.TrimSpace(string(aside)))
	}
	// Validate (and create) the file now, so faults show at startup.
	if err := s.update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		return nil, err
	}
	return s, nil
}

var _ manage.DamageReporter = (*Store)(nil)

// Damages implements manage.DamageReporter: the damaged files this Store
// moved aside and replaced with an empty one, counting one an earlier
// Store replaced whose rebuild was never marked done.
func (s *Store) Damages() uint64 { return s.damages.Load() }

var _ manage.RebuildMarker = (*Store)(nil)

// MarkRebuilt implements manage.RebuildMarker: the records lost with the
// damaged files are rebuilt, so a later Open does not count the damage
// again. No-op when nothing is pending.
func (s *Store) MarkRebuilt() error {
	if err := os.Remove(s.pendingPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store file %s: %w", s.path, err)
	}
	return nil
}

// pendingPath is the file that, while it exists, says the store file was
// replaced after damage and its records are not rebuilt yet: it outlives a
// server that dies between the two, so the next one rebuilds (and its
// reapers spare unrecorded sandboxes) rather than trusting an empty store.
// It holds the damaged file's new name.
func (s *Store) pendingPath() string { return s.path + ".rebuild-pending" }

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// errCorrupt marks a file bbolt cannot read.
var errCorrupt = errors.New("corrupt store file")

// open opens the file for one operation, recovering from corruption once.
func (s *Store) open(readOnly bool) (*bolt.DB, error) {
	if s.closed {
		return nil, errors.New("store is closed")
	}
	db, err := s.openOnce(readOnly)
	if err == nil || !errors.Is(err, errCorrupt) {
		return db, err
	}
	aside := fmt.Sprintf("%s.corrupt-%s", s.path, time.Now().UTC().Format("20060102T150405Z"))
	// The mark first: a crash between the two leaves it with the damaged
	// file still in place, which the next open moves aside again.
	if werr := atomicfile.Write(s.pendingPath(), []byte(aside+"\n"), 0o600); werr != nil {
		return nil, fmt.Errorf("store file %s is corrupt (%v) and the rebuild could not be recorded: %w", s.path, err, werr)
	}
	if rerr := os.Rename(s.path, aside); rerr != nil {
		return nil, fmt.Errorf("store file %s is corrupt (%v) and could not be moved aside: %w", s.path, err, rerr)
	}
	s.damages.Add(1)
	s.log.Error("store file was corrupt; moved it aside and started a fresh one (the server rebuilds the records from the sandboxes on disk; their sandboxes are untouched)",
		"file", s.path, "moved_to", aside, "err", err)
	return s.openOnce(readOnly)
}

func (s *Store) openOnce(readOnly bool) (db *bolt.DB, err error) {
	// bbolt panics on some kinds of damaged pages, and faults reading a
	// page the file does not hold (made a panic here, see tx); treat both
	// as corruption.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, fmt.Errorf("%w: %v", errCorrupt, p)
		}
	}()
	if _, statErr := os.Stat(s.path); errors.Is(statErr, os.ErrNotExist) {
		if err := s.create(); err != nil {
			return nil, err
		}
	}
	checkCtx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := s.checkFile(checkCtx); err != nil {
		return nil, err
	}
	db, err = bolt.Open(s.path, 0o600, &bolt.Options{Timeout: s.timeout, ReadOnly: readOnly})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("store file %s is locked by another process for more than %s; is another sandbox-mcp using this --state-dir and stuck?", s.path, s.timeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EROFS):
		return nil, fmt.Errorf("store file %s cannot be opened for writing: %w", s.path, err)
	}
	return nil, fmt.Errorf("store file %s: %w", s.path, err)
}

// create makes the store file whole under a temporary name and links it
// into place, so that the file at s.path is never seen empty or half
// initialised: an empty store file is then always damage. A file another
// process linked first is kept.
func (s *Store) create() error {
	tmp, err := os.CreateTemp(filepath.Dir(s.path), "."+FileName+".new-*")
	if err != nil {
		return fmt.Errorf("store file %s: %w", s.path, err)
	}
	name := tmp.Name()
	tmp.Close()
	defer os.Remove(name)
	// bbolt initialises a file it finds empty.
	db, err := bolt.Open(name, 0o600, &bolt.Options{Timeout: s.timeout})
	if err != nil {
		return fmt.Errorf("store file %s: %w", s.path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store file %s: %w", s.path, err)
	}
	if err := os.Link(name, s.path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("store file %s: %w", s.path, err)
	}
	return nil
}

func (s *Store) update(fn func(*bolt.Tx) error) error { return s.tx(false, fn) }

func (s *Store) view(fn func(*bolt.Tx) error) error { return s.tx(true, fn) }

// tx opens the file for one transaction and closes it again, so other
// processes sharing the state directory get their turn.
func (s *Store) tx(readOnly bool, fn func(*bolt.Tx) error) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	db, err := s.open(readOnly)
	if err != nil {
		return err
	}
	defer db.Close()
	// A fault on the mapping (the file shrank under it) becomes a panic of
	// this goroutine instead of killing the process, and is recovered below.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("store file %s: %w: %v", s.path, errCorrupt, p)
		}
	}()
	if readOnly {
		return db.View(fn)
	}
	return db.Update(fn)
}

// Get implements manage.Store.
func (s *Store) Get(_ context.Context, key string) (manage.Record, bool, error) {
	var rec manage.Record
	var ok bool
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return nil
		}
		raw := b.Get([]byte(key))
		if raw == nil {
			return nil
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("store record for workspace %q is unreadable: %w", key, err)
		}
		ok = true
		return nil
	})
	return rec, ok, err
}

// Put implements manage.Store.
func (s *Store) Put(_ context.Context, rec manage.Record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		return b.Put([]byte(rec.Key), raw)
	})
}

// Delete implements manage.Store.
func (s *Store) Delete(_ context.Context, key string) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return nil
		}
		return b.Delete([]byte(key))
	})
}

// List implements manage.Store. Records that cannot be decoded are skipped
// and logged, so one bad record never hides the others.
func (s *Store) List(context.Context) ([]manage.Record, error) {
	var out []manage.Record
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		out, err = decodeRecords(tx.Bucket(bucket), s.log)
		return err
	})
	return out, err
}

// decodeRecords returns the records in b (none when b is nil), skipping and
// logging those that cannot be decoded.
func decodeRecords(b *bolt.Bucket, log *slog.Logger) ([]manage.Record, error) {
	if b == nil {
		return nil, nil
	}
	var out []manage.Record
	err := b.ForEach(func(k, v []byte) error {
		var rec manage.Record
		if err := json.Unmarshal(v, &rec); err != nil {
			log.Warn("skipping unreadable store record", "key", string(k), "err", err)
			return nil
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

// Lock implements manage.Store with an flock(2) on a per-key file, which
// also excludes other processes using the same state directory. A wait that
// ctx ends leaves nothing behind (see filelock).
func (s *Store) Lock(ctx context.Context, key string) (context.Context, func(), error) {
	sum := sha256.Sum256([]byte(key))
	path := filepath.Join(s.lockDir, hex.EncodeToString(sum[:12])+".lock")
	f, err := filelock.Lock(ctx, path, filelock.Exclusive)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("lock for workspace %q: %w", key, err)
	}
	held, release := manage.NewHeldContext()
	var once sync.Once
	return held, func() {
		once.Do(func() {
			release()
			_ = filelock.Unlock(f)
		})
	}, nil
}

// ReserveSlot implements manage.Store in one write transaction, which the
// file lock makes exclusive across every process using the file: it reads
// the records and reservations, drops the reservations that lapsed, and
// adds req's when the owner has room.
func (s *Store) ReserveSlot(_ context.Context, req manage.SlotRequest) (func(), error) {
	r := manage.SlotReservation{Key: req.Key, Owner: req.Owner, Token: manage.NewSlotToken()}
	err := s.update(func(tx *bolt.Tx) error {
		recs, err := decodeRecords(tx.Bucket(bucket), s.log)
		if err != nil {
			return err
		}
		sb, err := tx.CreateBucketIfNotExists(slotBucket)
		if err != nil {
			return err
		}
		now := time.Now()
		var reserved []manage.SlotReservation
		var lapsed [][]byte
		if err := sb.ForEach(func(k, v []byte) error {
			var res manage.SlotReservation
			if json.Unmarshal(v, &res) != nil || !now.Before(res.Expires) {
				lapsed = append(lapsed, k)
				return nil
			}
			reserved = append(reserved, res)
			return nil
		}); err != nil {
			return err
		}
		for _, k := range lapsed {
			if err := sb.Delete(k); err != nil {
				return err
			}
		}
		held, mine := manage.CountSlots(req, recs, reserved, now)
		if !mine && held >= req.Max {
			return &manage.LimitError{Owner: req.Owner, Max: req.Max, Held: held}
		}
		r.Expires = now.Add(req.Expiry)
		raw, err := json.Marshal(r)
		if err != nil {
			return err
		}
		return sb.Put([]byte(r.Key), raw)
	})
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { s.releaseSlot(r) }) }, nil
}

// releaseSlot deletes r unless a later reservation of its key replaced it.
// A failure is logged: the reservation then lapses by itself.
func (s *Store) releaseSlot(r manage.SlotReservation) {
	err := s.update(func(tx *bolt.Tx) error {
		sb := tx.Bucket(slotBucket)
		if sb == nil {
			return nil
		}
		var cur manage.SlotReservation
		if raw := sb.Get([]byte(r.Key)); raw == nil || json.Unmarshal(raw, &cur) != nil || cur.Token != r.Token {
			return nil
		}
		return sb.Delete([]byte(r.Key))
	})
	if err != nil {
		s.log.Warn("could not release a sandbox slot reservation; it lapses by itself", "key", r.Key, "expires", r.Expires, "err", err)
	}
}

// Close implements manage.Store. Operations after Close fail.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

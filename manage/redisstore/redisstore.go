// Package redisstore is a manage.Store on Redis, for several server replicas
// that share one view of the workspaces: the records, and the creation lock
// that keeps two replicas from making two sandboxes for one key.
//
// Layout: under a key prefix (Options.KeyPrefix, default DefaultKeyPrefix),
// PREFIX "ws:" KEY holds a workspace's record as JSON and PREFIX "lock:" KEY
// its creation lock. List walks PREFIX "ws:*" with SCAN in bounded batches
// (never KEYS), the prefix's glob characters escaped, and keeps only
// records whose own key matches the Redis key they were found under, so
// another prefix's records never show.
//
// Expiry rule: a record of a sandbox that may be running never expires (the
// Manager writes a new record on every change of state, and a running
// sandbox lives as long as it is used). A record of a paused, stopped or gone
// sandbox expires Options.RecordTTL after its last Put (each Put sets the
// expiry again). The server sets RecordTTL longer than --paused-ttl, after
// which the reaper kills a paused sandbox: so a paused sandbox's record
// outlives it, and the sandbox is never orphaned while any replica runs its
// reaper within RecordTTL minus the paused TTL.
//
// Lock: SET NX PX with a random token, renewed every third of
// Options.LockExpiry while held, released by a compare-and-delete script
// (only the holder's token is deleted). A waiter retries with jittered
// backoff until its context ends. A holder that dies stops renewing: its lock
// expires after LockExpiry and another replica proceeds. The held context
// Lock returns is cancelled with manage.ErrLockLost when a renewal finds
// another token (or none), or when no renewal succeeded for two thirds of
// LockExpiry (Redis unreachable): the lock may then expire before this
// holder notices, so it gives it up first. The Manager creates under that
// context: a lost lock cancels the provider's Create, and a sandbox made
// under a lost lock is killed, never recorded (see manage.Manager). What is
// not covered: a lock lost between the Manager's last check and its Put of
// the new record, a window of one Redis round trip while at least a third of
// LockExpiry of validity is left.
//
// Slots: PREFIX "slots:" OWNER is a sorted set of the workspace keys that
// count against the owner's limit of sandboxes (manage.Store.ReserveSlot).
// A member's score is the Redis server's time, in milliseconds, at which
// its reservation lapses; a released reservation gets score 0 and stays a
// member while its record holds a slot. One script, atomic on the server,
// counts the members that either have not lapsed or whose record (read by
// key from the member) records a sandbox that is not gone, removes the
// others, and adds the new reservation when the count is below the limit.
// So a slot is the record itself once the creation is recorded: a sandbox
// killed, reaped or forgotten by any replica (its record deleted, expired
// or marked gone) frees it at the next reservation, and a replica that dies
// before it releases a reservation holds the slot only until it lapses.
// Before the script, the owner's records found by List are added as members
// (score 0), so records written without a reservation (rebuilt after a
// damaged store, or older than the limit) count too. The script reads
// record keys it was not passed, which a single Redis (what Open connects
// to) allows and Redis Cluster would not.
//
// Faults: every command is bounded by Options.CommandTimeout, so a Redis
// that is down or frozen gives "redis store at ADDR unreachable: ..." and
// never a hang.
package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Defaults for Options fields left zero.
const (
	// DefaultKeyPrefix starts every Redis key the store writes.
	DefaultKeyPrefix = "sandbox-mcp:"
	// DefaultRecordTTL is how long a paused, stopped or gone sandbox's
	// record lives after its last write.
	DefaultRecordTTL = 30 * 24 * time.Hour
	// DefaultLockExpiry is how long a creation lock lives without renewal:
	// how long replicas wait for a holder that died.
	DefaultLockExpiry = 15 * time.Second
	// DefaultCommandTimeout bounds each Redis command.
	DefaultCommandTimeout = 3 * time.Second
)

// NoExpiry as Options.RecordTTL keeps every record until it is deleted.
const NoExpiry time.Duration = -1

// scanBatch is the COUNT hint of each SCAN.
const scanBatch = 200

// Options configures Open. The zero value is usable.
type Options struct {
	// KeyPrefix starts every key; replicas sharing workspaces use the same
	// one. Default DefaultKeyPrefix.
	KeyPrefix string
	// RecordTTL is how long a record of a paused, stopped or gone sandbox
	// lives after its last Put; NoExpiry keeps it. Default
	// DefaultRecordTTL.
	RecordTTL time.Duration
	// LockExpiry is the creation lock's expiry, renewed every third of it
	// while held. Default DefaultLockExpiry.
	LockExpiry time.Duration
	// CommandTimeout bounds each command. Default DefaultCommandTimeout.
	CommandTimeout time.Duration
	// Logger receives notes about lost locks and skipped records. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Store is a manage.Store on Redis. It is safe for concurrent use, by
// several goroutines and several processes.
type Store struct {
	rdb    *redis.Client
	addr   string // for messages: host:port or unix:/path, never credentials
	prefix string
	opts   Options
	log    *slog.Logger

	mu     sync.Mutex
	held   map[*heldLock]struct{}
	closed bool
}

var _ manage.Store = (*Store)(nil)

// Open connects to the Redis at rawURL (redis://[user:pass@]host:port/db,
// rediss:// for TLS, unix:///path?db=N) and checks that it answers, so a
// wrong address shows at startup.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	ropts, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = DefaultKeyPrefix
	}
	if opts.RecordTTL == 0 {
		opts.RecordTTL = DefaultRecordTTL
	}
	if opts.LockExpiry <= 0 {
		opts.LockExpiry = DefaultLockExpiry
	}
	if opts.CommandTimeout <= 0 {
		opts.CommandTimeout = DefaultCommandTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	setRedisLog.Do(func() { redis.SetLogger(redisLog{log: opts.Logger}) })
	ropts.DialTimeout = opts.CommandTimeout
	ropts.ReadTimeout = opts.CommandTimeout
	ropts.WriteTimeout = opts.CommandTimeout
	ropts.PoolTimeout = opts.CommandTimeout
	ropts.ContextTimeoutEnabled = true
	ropts.MaxRetries = 1
	ropts.DisableIdentity = true
	ropts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	addr := ropts.Addr
	if ropts.Network == "unix" {
		addr = "unix:" + addr
	}
	s := &Store{rdb: redis.NewClient(ropts), addr: addr, prefix: opts.KeyPrefix, opts: opts, log: opts.Logger, held: map[*heldLock]struct{}{}}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	if err := s.rdb.Ping(cctx).Err(); err != nil {
		s.rdb.Close()
		return nil, s.fault(ctx, "ping", err)
	}
	return s, nil
}

// ParseURL checks a Redis URL and returns go-redis options for it. Its
// errors never repeat a password.
func ParseURL(rawURL string) (*redis.Options, error) {
	shown := "(unparsable URL)"
	if u, err := url.Parse(rawURL); err == nil {
		shown = u.Redacted()
	}
	switch {
	case strings.HasPrefix(rawURL, "redis://"), strings.HasPrefix(rawURL, "rediss://"), strings.HasPrefix(rawURL, "unix://"):
	default:
		return nil, fmt.Errorf("redis store URL %s: want redis://[user:pass@]host:port/db, rediss://… (TLS) or unix:///path/to/socket", shown)
	}
	ropts, err := redis.ParseURL(rawURL)
	if err != nil {
		msg := err.Error()
		if u, perr := url.Parse(rawURL); perr == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
		return nil, fmt.Errorf("redis store URL %s: %s", shown, msg)
	}
	return ropts, nil
}

// Addr returns the Redis address (host:port, or unix:/path).
func (s *Store) Addr() string { return s.addr }

// cmdCtx bounds one command by CommandTimeout.
func (s *Store) cmdCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.CommandTimeout)
}

// fault turns a command's error into the store's: the caller's context
// ending stays that; an error Redis answered names the command; anything
// else means Redis could not be reached in time. The cause is not wrapped:
// the command's own timeout must not read as the caller's context ending.
func (s *Store) fault(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return fmt.Errorf("redis store at %s: %s: %v", s.addr, what, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("redis store at %s unreachable: %s: no answer within %s", s.addr, what, s.opts.CommandTimeout)
	}
	return fmt.Errorf("redis store at %s unreachable: %s: %v", s.addr, what, err)
}

// redisLog routes go-redis's own log lines (dial retries and the like) to
// slog at debug level, instead of its default of stderr.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}

// setRedisLog installs redisLog once per process (go-redis has one global
// logger); the first store's Logger receives the lines.
var setRedisLog sync.Once

func (s *Store) recordKey(key string) string { return s.prefix + "ws:" + key }

func (s *Store) lockKey(key string) string { return s.prefix + "lock:" + key }

func (s *Store) slotsKey(owner string) string { return s.prefix + "slots:" + owner }

func (s *Store) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("redis store is closed")
	}
	return nil
}

// Get implements manage.Store.
func (s *Store) Get(ctx context.Context, key string) (manage.Record, bool, error) {
	if err := s.checkOpen(); err != nil {
		return manage.Record{}, false, err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	raw, err := s.rdb.Get(cctx, s.recordKey(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return manage.Record{}, false, nil
	}
	if err != nil {
		return manage.Record{}, false, s.fault(ctx, "get", err)
	}
	var rec manage.Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return manage.Record{}, false, fmt.Errorf("redis store at %s: record for workspace %q is unreadable: %w", s.addr, key, err)
	}
	return rec, true, nil
}

// ttlOf is the expiry a Put gives rec (0: none); see the package comment.
func (s *Store) ttlOf(rec manage.Record) time.Duration {
	switch rec.State {
	case manage.StatePaused, manage.StateStopped, manage.StateGone:
		if s.opts.RecordTTL > 0 {
			return s.opts.RecordTTL
		}
	}
	return 0
}

// Put implements manage.Store; it sets the record's expiry again (see the
// package comment).
func (s *Store) Put(ctx context.Context, rec manage.Record) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	if err := s.rdb.Set(cctx, s.recordKey(rec.Key), raw, s.ttlOf(rec)).Err(); err != nil {
		return s.fault(ctx, "set", err)
	}
	return nil
}

// Delete implements manage.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	cctx, cancel := s.cmdCtx(ctx)
	defer cancel()
	if err := s.rdb.Del(cctx, s.recordKey(key)).Err(); err != nil {
		return s.fault(ctx, "del", err)
	}
	return nil
}

// escapeGlob escapes the characters Redis glob patterns give a meaning.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// List implements manage.Store, with SCAN in batches and MGET per batch.
// Records that cannot be decoded, or whose key does not match the Redis key
// they are under, are skipped and logged.
func (s *Store) List(ctx context.Context) ([]manage.Record, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	base := s.recordKey("")
	match := escapeGlob(base) + "*"
	seen := map[string]bool{}
	var out []manage.Record
	var cursor uint64
	for {
		cctx, cancel := s.cmdCtx(ctx)
		keys, next, err := s.rdb.Scan(cctx, cursor, match, scanBatch).Result()
		cancel()
		if err != nil {
			return nil, s.fault(ctx, "scan", err)
		}
		var batch []string
		for _, k := range keys {
			if strings.HasPrefix(k, base) && !seen[k] {
				seen[k] = true
				batch = append(batch, k)
			}
		}
		if len(batch) > 0 {
			cctx, cancel := s.cmdCtx(ctx)
			vals, err := s.rdb.MGet(cctx, batch...).Result()
			cancel()
			if err != nil {
				return nil, s.fault(ctx, "mget", err)
			}
			for i, v := range vals {
				raw, ok := v.(string)
				if !ok {
					continue // deleted or expired since the SCAN
				}
				var rec manage.Record
				if err := json.Unmarshal([]byte(raw), &rec); err != nil {
					s.log.Warn("skipping unreadable redis store record", "key", batch[i], "err", err)
					continue
				}
				if s.recordKey(rec.Key) != batch[i] {
					s.log.Warn("skipping redis store record whose key does not match its place", "key", batch[i], "record_key", rec.Key)
					continue
				}
				out = append(out, rec)
			}
		}
		cursor = next
		if cursor == 0 {
			return out, nil
		}
	}
}

// Close implements manage.Store: locks still held are released, and
// operations after Close fail.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	held := make([]*heldLock, 0, len(s.held))
	for h := range s.held {
		held = append(held, h)
	}
	s.mu.Unlock()
	for _, h := range held {
		s.unlock(h)
	}
	return s.rdb.Close()
}

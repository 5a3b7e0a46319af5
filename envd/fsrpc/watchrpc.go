//go:build linux

package fsrpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/envd/keepalive"
	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

// MaxBufferedEvents caps the events a polling watcher holds between two
// GetWatcherEvents calls. Past it new events are dropped and counted; the
// call that drains the full buffer returns the buffered events, and the next
// call fails once with resource_exhausted saying how many were lost (the
// client should re-list the directory), after which the watcher carries on.
// A kernel queue overflow is reported the same way.
const MaxBufferedEvents = 10_000

// watchRequest is what WatchDirRequest and CreateWatcherRequest share.
type watchRequest interface {
	GetPath() string
	GetRecursive() bool
	GetIncludeEntry() bool
	GetAllowNetworkMounts() bool
}

// WatchDir streams events for a directory: start{} once the watch is armed,
// then filesystem events and keepalives (see keepalive.Header; the interval
// restarts after each event). An event's entry (include_entry) describes the
// path when the event is handled, so it is absent when the path is already
// gone by then. The stream ends normally when the client goes
// away, the directory itself is removed or moved (after that event), or the
// service closes; it fails with resource_exhausted if the kernel dropped
// events.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	w, err := s.startWatch(ctx, req.Msg)
	if err != nil {
		return err
	}
	defer s.stopWatch(w)

	start := &filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}
	if err := stream.Send(start); err != nil {
		return err
	}
	interval := keepalive.Interval(req.Header())
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case it, ok := <-w.items:
			if !ok {
				return nil
			}
			if it.lost {
				return connect.NewError(connect.CodeResourceExhausted,
					fmt.Errorf("watch on %s lost events: the kernel event queue overflowed; re-list the directory", w.root))
			}
			msg := &filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: it.event}}
			if err := stream.Send(msg); err != nil {
				return err
			}
		case <-timer.C:
			msg := &filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		timer.Reset(interval)
	}
}

// CreateWatcher starts a polling watcher and returns its id. Events are
// buffered (see MaxBufferedEvents) until GetWatcherEvents drains them. A
// watcher not drained for Options.PollerIdle is dropped, and at most
// Options.MaxPollers live at once: past that, CreateWatcher fails with
// resource_exhausted.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	s.sweepPollers()
	if err := s.pollerRoom(); err != nil {
		return nil, err
	}
	w, err := s.startWatch(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	p := &poller{id: newWatcherID(), w: w, limit: MaxBufferedEvents}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		w.close()
		return nil, errClosed()
	}
	if err := s.pollerRoomLocked(); err != nil {
		s.mu.Unlock()
		s.stopWatch(w)
		return nil, err
	}
	p.used = s.now()
	s.pollers[p.id] = p
	if s.sweeper == nil {
		s.sweeper = time.AfterFunc(s.pollerIdle, s.sweepTick)
	}
	s.mu.Unlock()
	go p.pump()
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: p.id}), nil
}

// GetWatcherEvents returns and forgets the events buffered for a watcher.
// An unknown id, or that of a watcher dropped for being idle, is not_found.
func (s *Service) GetWatcherEvents(_ context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	s.sweepPollers()
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	p, ok := s.pollers[id]
	if ok {
		p.used = s.now()
	}
	s.mu.Unlock()
	if !ok {
		return nil, watcherNotFound(id)
	}
	events, err := p.drain()
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: events}), nil
}

// RemoveWatcher stops a watcher and drops its buffered events. An unknown id
// is not_found.
func (s *Service) RemoveWatcher(_ context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	p, ok := s.pollers[id]
	delete(s.pollers, id)
	s.mu.Unlock()
	if !ok {
		return nil, watcherNotFound(id)
	}
	s.stopWatch(p.w)
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}

// pollerRoom fails with resource_exhausted when Options.MaxPollers polling
// watchers are alive.
func (s *Service) pollerRoom() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pollerRoomLocked()
}

func (s *Service) pollerRoomLocked() error {
	if len(s.pollers) < s.maxPollers {
		return nil
	}
	return connect.NewError(connect.CodeResourceExhausted,
		fmt.Errorf("%d polling watchers are already open, the most allowed: remove unused ones with RemoveWatcher", len(s.pollers)))
}

// sweepPollers drops the polling watchers that nobody has drained for
// Options.PollerIdle, as RemoveWatcher would: their client is most likely
// gone, and each holds an inotify instance, of which every user of the
// machine has few.
func (s *Service) sweepPollers() {
	type dropped struct {
		p    *poller
		idle time.Duration
	}
	var drop []dropped
	s.mu.Lock()
	now := s.now()
	for id, p := range s.pollers {
		if idle := now.Sub(p.used); idle >= s.pollerIdle {
			drop = append(drop, dropped{p, idle})
			delete(s.pollers, id)
		}
	}
	s.mu.Unlock()
	for _, d := range drop {
		s.log.Info("dropped a polling watcher nobody drained", "id", d.p.id, "path", d.p.w.root, "idle", d.idle.Round(time.Second))
		s.stopWatch(d.p.w)
	}
}

// sweepTick runs sweepPollers from a timer while polling watchers exist, so
// that idle ones are dropped even when no watcher RPC comes.
func (s *Service) sweepTick() {
	s.sweepPollers()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.pollers) == 0 {
		s.sweeper = nil
		return
	}
	// Next when the longest-idle one would expire, but not in a busy loop.
	now := s.now()
	next := s.pollerIdle
	for _, p := range s.pollers {
		next = min(next, p.used.Add(s.pollerIdle).Sub(now))
	}
	s.sweeper.Reset(max(next, time.Second))
}

func watcherNotFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id '%s' not found", id))
}

func errClosed() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("filesystem service is shutting down"))
}

// startWatch checks and resolves a watch request and starts the watch,
// registered so that Close stops it.
func (s *Service) startWatch(ctx context.Context, req watchRequest) (*watch, error) {
	p, err := s.resolve(req.GetPath(), s.users.FromContext(ctx))
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("directory not found: %s", p))
	case err != nil:
		return nil, fsError(err, "stat "+p)
	case !info.IsDir():
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", p))
	}
	if !req.GetAllowNetworkMounts() {
		if fsName, ok := networkFS(p); ok {
			return nil, connect.NewError(connect.CodeInvalidArgument,
				fmt.Errorf("%s is on a network filesystem (%s), where changes made elsewhere are not seen; set allow_network_mounts to watch it anyway", p, fsName))
		}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errClosed()
	}

	w, err := newWatch(p, req.GetRecursive(), req.GetIncludeEntry(), s.log)
	if err != nil {
		return nil, watchError(err, p)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		w.close()
		return nil, errClosed()
	}
	s.watches[w] = struct{}{}
	s.mu.Unlock()
	return w, nil
}

// stopWatch unregisters and stops w.
func (s *Service) stopWatch(w *watch) {
	s.mu.Lock()
	delete(s.watches, w)
	s.mu.Unlock()
	w.close()
}

// watchError explains inotify's resource errors, whose errno text ("no
// space left on device") would mislead.
func watchError(err error, p string) error {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("watch %s: the inotify watch limit is reached (sysctl fs.inotify.max_user_watches)", p))
	case errors.Is(err, syscall.EMFILE):
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("watch %s: too many inotify instances (sysctl fs.inotify.max_user_instances)", p))
	}
	return fsError(err, "watch "+p)
}

func newWatcherID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

// networkFilesystems maps statfs magic numbers to names for filesystems
// where inotify misses changes made by other machines.
var networkFilesystems = map[uint32]string{
	unix.NFS_SUPER_MAGIC:  "nfs",
	unix.SMB_SUPER_MAGIC:  "smb",
	unix.SMB2_SUPER_MAGIC: "smb2",
	unix.CIFS_SUPER_MAGIC: "cifs",
	unix.FUSE_SUPER_MAGIC: "fuse",
	unix.CEPH_SUPER_MAGIC: "ceph",
	unix.AFS_SUPER_MAGIC:  "afs",
	unix.AFS_FS_MAGIC:     "afs",
	unix.CODA_SUPER_MAGIC: "coda",
	unix.NCP_SUPER_MAGIC:  "ncp",
	unix.V9FS_MAGIC:       "9p",
}

// networkFS reports whether path is on a network filesystem, and which.
func networkFS(path string) (string, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "", false
	}
	return networkFSName(uint32(st.Type))
}

func networkFSName(magic uint32) (string, bool) {
	name, ok := networkFilesystems[magic]
	return name, ok
}

// poller buffers a watch's events for the polling RPCs.
type poller struct {
	id    string
	w     *watch
	limit int
	used  time.Time // creation or the last GetWatcherEvents; guarded by Service.mu

	mu       sync.Mutex
	events   []*filesystem.FilesystemEvent
	dropped  int    // events dropped since the last drain: the buffer was full
	overflow bool   // the kernel dropped events since the last drain
	loss     string // a loss to report on the next drain
}

// pump moves items from the watch into the buffer until the watch ends.
func (p *poller) pump() {
	for it := range p.w.items {
		p.add(it)
	}
}

func (p *poller) add(it watchItem) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case it.lost:
		p.overflow = true
	case len(p.events) >= p.limit:
		p.dropped++
	default:
		p.events = append(p.events, it.event)
	}
}

// drain returns the buffered events, or reports a loss once (see
// MaxBufferedEvents).
func (p *poller) drain() ([]*filesystem.FilesystemEvent, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loss == "" && (p.dropped > 0 || p.overflow) {
		switch {
		case p.dropped > 0 && p.overflow:
			p.loss = fmt.Sprintf("%d events past its buffer of %d were dropped and the kernel event queue overflowed", p.dropped, p.limit)
		case p.dropped > 0:
			p.loss = fmt.Sprintf("%d events past its buffer of %d were dropped", p.dropped, p.limit)
		default:
			p.loss = "the kernel event queue overflowed"
		}
		p.dropped, p.overflow = 0, false
		if len(p.events) > 0 {
			// Deliver what came before the loss first; report it next time.
			events := p.events
			p.events = nil
			return events, nil
		}
	}
	if p.loss != "" {
		err := connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("watcher with id '%s' lost events: %s; poll more often and re-list the directory", p.id, p.loss))
		p.loss = ""
		return nil, err
	}
	events := p.events
	p.events = nil
	return events, nil
}

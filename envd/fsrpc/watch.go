//go:build linux

package fsrpc

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/fsnotify/fsnotify"

	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

// watchItem is what a watch delivers: one event, or a note that the kernel
// dropped events (its queue overflowed).
type watchItem struct {
	event *filesystem.FilesystemEvent
	lost  bool
}

// watch follows one directory with inotify (through fsnotify) and turns what
// it sees into FilesystemEvents on items. One goroutine (loop) owns the
// fsnotify watcher and the bookkeeping below; close stops it.
//
// With recursive set, every subdirectory is watched too, including ones
// created or moved in later: the new directory is watched before its CREATE
// is delivered, and whatever it already holds by then is reported as CREATE
// events right after it (mkdir -p a/b/c would otherwise lose b and c).
//
// The watch ends on its own, closing items, after the watched directory
// itself is removed or moved away (that REMOVE or RENAME event, named ".", is
// the last one).
type watch struct {
	root         string
	recursive    bool
	includeEntry bool
	log          *slog.Logger

	fsw      *fsnotify.Watcher
	items    chan watchItem // closed when loop returns
	stop     chan struct{}  // closed by close
	stopOnce sync.Once
	done     chan struct{} // closed after loop has released the watcher

	// Owned by loop.
	dirs  map[string]bool   // watched subdirectories (the root excluded)
	moved map[string]uint64 // watched subdirectories renamed away, by event seq
	seq   uint64            // events handled so far
	// uploads are the destinations whose upload's temporary file (see
	// UploadTempPattern) was just renamed away, towards them.
	uploads map[string]bool
}

// uploadTempInfix separates a destination's name from the random suffix
// in an upload's temporary name.
const uploadTempInfix = ".upload-"

// UploadTempPattern is the os.CreateTemp pattern of the temporary file an
// upload to a file named base is staged in, beside it, before it is
// renamed into place: ".BASE.upload-*" (base cut to 100 bytes to leave
// room in NAME_MAX). Watches never report such names: the rename onto the
// destination is reported as WRITE on it, as E2B's envd, which writes in
// place, reports an upload (the uploader creates a new destination first,
// which is its CREATE).
func UploadTempPattern(base string) string {
	if len(base) > 100 {
		base = base[:100]
	}
	return "." + base + uploadTempInfix + "*"
}

// uploadDestination returns the destination name (possibly cut to 100
// bytes) of an upload's temporary file name, or false when name is not
// one: ".BASE.upload-DIGITS", as os.CreateTemp makes from
// UploadTempPattern.
func uploadDestination(name string) (string, bool) {
	if !strings.HasPrefix(name, ".") {
		return "", false
	}
	i := strings.LastIndex(name, uploadTempInfix)
	if i < 2 {
		return "", false
	}
	digits := name[i+len(uploadTempInfix):]
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return "", false
	}
	return name[1:i], true
}

// upload handles an event on an upload's temporary file (dropped) or the
// rename of one onto its destination (a WRITE); it reports whether ev was one (and is
// handled), and whether the watch goes on.
func (w *watch) upload(ev fsnotify.Event, path string) (handled, ok bool) {
	dir, name := filepath.Split(path)
	if dest, isTemp := uploadDestination(name); isTemp {
		final := filepath.Join(dir, dest)
		// The temporary file is renamed away (IN_MOVED_FROM) right before
		// it arrives at final (IN_MOVED_TO, which fsnotify reports as
		// Create, like a new file).
		switch {
		case ev.Has(fsnotify.Rename):
			w.uploads[final] = true
		case ev.Has(fsnotify.Remove):
			delete(w.uploads, final) // an aborted upload
		}
		return true, true
	}
	if !ev.Has(fsnotify.Create) {
		return false, true
	}
	key := path
	pending := w.uploads[key]
	if !pending && len(name) > 100 {
		key = filepath.Join(dir, name[:100])
		pending = w.uploads[key]
	}
	if !pending {
		return false, true
	}
	delete(w.uploads, key)
	return true, w.emit(path, filesystem.EventType_EVENT_TYPE_WRITE)
}

// selfMoveWindow bounds how many events later the duplicate RENAME of a moved
// directory is still recognised (see handle).
const selfMoveWindow = 16

// newWatch starts watching root, an existing directory. The caller must
// call close.
func newWatch(root string, recursive, includeEntry bool, log *slog.Logger) (*watch, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &watch{
		root:         root,
		recursive:    recursive,
		includeEntry: includeEntry,
		log:          log,
		fsw:          fsw,
		items:        make(chan watchItem),
		stop:         make(chan struct{}),
		done:         make(chan struct{}),
		dirs:         map[string]bool{},
		moved:        map[string]uint64{},
		uploads:      map[string]bool{},
	}
	if err := fsw.Add(root); err != nil {
		fsw.Close()
		return nil, err
	}
	if recursive {
		// Read through root (it may be a symlink to a directory); links met
		// below are not followed.
		dirents, err := os.ReadDir(root)
		if err != nil {
			fsw.Close()
			return nil, err
		}
		for _, d := range dirents {
			if !d.IsDir() {
				continue
			}
			if _, err := w.addTree(filepath.Join(root, d.Name())); err != nil {
				fsw.Close()
				return nil, err
			}
		}
	}
	go w.loop()
	return w, nil
}

// close stops the watch and waits until its resources are released. It is
// safe to call more than once and from any goroutine.
func (w *watch) close() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

func (w *watch) loop() {
	defer close(w.done)
	defer close(w.items)
	defer w.fsw.Close()
	for {
		select {
		case <-w.stop:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok || !w.handle(ev) {
				return
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				if !w.send(watchItem{lost: true}) {
					return
				}
				continue
			}
			w.log.Warn("filesystem watch error", "path", w.root, "error", err)
		}
	}
}

// eventOps lists fsnotify operations in the order one event's bits are
// reported.
var eventOps = []struct {
	op  fsnotify.Op
	typ filesystem.EventType
}{
	{fsnotify.Create, filesystem.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, filesystem.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, filesystem.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, filesystem.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, filesystem.EventType_EVENT_TYPE_CHMOD},
}

// handle turns one fsnotify event into FilesystemEvents. It returns false
// when the watch must end (stopped, or the root itself went away).
func (w *watch) handle(ev fsnotify.Event) bool {
	w.seq++
	path := filepath.Clean(ev.Name)
	isRoot := path == w.root
	if !isRoot {
		if handled, ok := w.upload(ev, path); handled {
			return ok
		}
	}

	// A watched subdirectory that is renamed is reported twice: by its
	// parent (IN_MOVED_FROM) and by its own watch (IN_MOVE_SELF), in that
	// order. Keep the first.
	echo := false
	if ev.Has(fsnotify.Rename) && !w.dirs[path] {
		if at, ok := w.moved[path]; ok {
			delete(w.moved, path)
			echo = w.seq-at <= selfMoveWindow
		}
	}

	var contents []string
	if w.recursive && !isRoot {
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			w.forget(path, ev.Has(fsnotify.Rename))
		}
		if ev.Has(fsnotify.Create) {
			if info, err := os.Lstat(path); err == nil && info.IsDir() {
				var err error
				contents, err = w.addTree(path)
				if err != nil {
					w.log.Warn("cannot watch new subdirectory", "path", path, "error", err)
				}
			}
		}
	}

	for _, o := range eventOps {
		if !ev.Has(o.op) || (o.op == fsnotify.Rename && echo) {
			continue
		}
		if !w.emit(path, o.typ) {
			return false
		}
	}
	for _, p := range contents {
		if !w.emit(p, filesystem.EventType_EVENT_TYPE_CREATE) {
			return false
		}
	}
	rootGone := isRoot && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename))
	return !rootGone
}

// addTree watches dir and, recursively, the directories under it (not
// following symlinks). It returns the paths found inside, in lexical
// pre-order, so that a directory created during the watch can have its
// contents reported. Directories that vanish or cannot be read meanwhile are
// skipped; running out of inotify resources is returned.
func (w *watch) addTree(dir string) ([]string, error) {
	if err := w.fsw.Add(dir); err != nil {
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENOMEM) {
			return nil, err
		}
		return nil, nil // vanished, replaced by a file, or unreadable
	}
	w.dirs[dir] = true
	delete(w.moved, dir)
	dirents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	var found []string
	for _, d := range dirents {
		p := filepath.Join(dir, d.Name())
		found = append(found, p)
		if d.IsDir() {
			below, err := w.addTree(p)
			found = append(found, below...)
			if err != nil {
				return found, err
			}
		}
	}
	return found, nil
}

// forget drops dir and the watched directories under it after dir was
// removed or renamed. A rename leaves the kernel watches alive under names
// that are now wrong, so they are removed too; the directory's new location,
// if still inside the tree, arrives as a CREATE and is watched afresh.
func (w *watch) forget(dir string, renamed bool) {
	if !w.dirs[dir] {
		return
	}
	prefix := dir + string(filepath.Separator)
	for d := range w.dirs {
		if d != dir && !strings.HasPrefix(d, prefix) {
			continue
		}
		delete(w.dirs, d)
		if renamed {
			_ = w.fsw.Remove(d) // already gone is fine
		}
	}
	if renamed {
		w.moved[dir] = w.seq
		if len(w.moved) > 64 {
			for p, at := range w.moved {
				if w.seq-at > selfMoveWindow {
					delete(w.moved, p)
				}
			}
		}
	}
}

// emit delivers one event for path. The entry is attached for CREATE, WRITE
// and CHMOD when requested and the path still exists.
func (w *watch) emit(path string, typ filesystem.EventType) bool {
	ev := &filesystem.FilesystemEvent{Name: validUTF8(w.rel(path)), Type: typ}
	if w.includeEntry {
		switch typ {
		case filesystem.EventType_EVENT_TYPE_CREATE, filesystem.EventType_EVENT_TYPE_WRITE, filesystem.EventType_EVENT_TYPE_CHMOD:
			if e, err := entryInfo(path); err == nil {
				ev.Entry = e
			}
		}
	}
	return w.send(watchItem{event: ev})
}

func (w *watch) send(it watchItem) bool {
	select {
	case w.items <- it:
		return true
	case <-w.stop:
		return false
	}
}

// rel names path relative to the watched directory; the directory itself is
// ".".
func (w *watch) rel(path string) string {
	r, err := filepath.Rel(w.root, path)
	if err != nil {
		return path
	}
	return r
}

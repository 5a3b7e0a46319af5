package envdclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

// versionOctetUpload is the first envd that takes application/octet-stream
// uploads; older ones take only multipart.
const versionOctetUpload = "0.5.7"

// FileType is the kind of a directory entry.
type FileType int

// The entry kinds envd reports.
const (
	TypeUnknown FileType = iota
	TypeFile
	TypeDir
	TypeSymlink
)

func (t FileType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	}
	return "unknown"
}

// Entry describes a file, directory or symlink.
type Entry struct {
	Name          string
	Path          string // absolute, inside the sandbox
	Type          FileType
	Size          int64
	Mode          uint32 // permission bits
	Permissions   string // like "-rw-r--r--"
	Owner, Group  string
	ModTime       time.Time
	SymlinkTarget string
	Metadata      map[string]string
}

func entryFrom(e *filesystem.EntryInfo) Entry {
	if e == nil {
		return Entry{}
	}
	out := Entry{
		Name: e.GetName(), Path: e.GetPath(), Size: e.GetSize(), Mode: e.GetMode(),
		Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(),
		SymlinkTarget: e.GetSymlinkTarget(), Metadata: e.GetMetadata(),
	}
	if t := e.GetModifiedTime(); t != nil {
		out.ModTime = t.AsTime()
	}
	switch e.GetType() {
	case filesystem.FileType_FILE_TYPE_FILE:
		out.Type = TypeFile
	case filesystem.FileType_FILE_TYPE_DIRECTORY:
		out.Type = TypeDir
	case filesystem.FileType_FILE_TYPE_SYMLINK:
		out.Type = TypeSymlink
	}
	return out
}

// Stat describes path (a symlink itself, not its target).
func (c *Client) Stat(ctx context.Context, path string) (Entry, error) {
	resp, err := c.files.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: path}))
	if err != nil {
		return Entry{}, wrapCallError("stat "+path, err)
	}
	return entryFrom(resp.Msg.GetEntry()), nil
}

// ListDir lists path to depth levels (0 is treated as 1).
func (c *Client) ListDir(ctx context.Context, path string, depth uint32) ([]Entry, error) {
	resp, err := c.files.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: path, Depth: depth}))
	if err != nil {
		return nil, wrapCallError("list "+path, err)
	}
	out := make([]Entry, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, entryFrom(e))
	}
	return out, nil
}

// MakeDir creates path and its parents. It reports false, and no error, when
// the directory already existed.
func (c *Client) MakeDir(ctx context.Context, path string) (bool, error) {
	_, err := c.files.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: path}))
	if connect.CodeOf(err) == connect.CodeAlreadyExists {
		return false, nil
	}
	if err != nil {
		return false, wrapCallError("mkdir "+path, err)
	}
	return true, nil
}

// Move renames src to dst, creating dst's parents.
func (c *Client) Move(ctx context.Context, src, dst string) (Entry, error) {
	resp, err := c.files.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: src, Destination: dst}))
	if err != nil {
		return Entry{}, wrapCallError("move "+src, err)
	}
	return entryFrom(resp.Msg.GetEntry()), nil
}

// Remove deletes path recursively; a missing path is not an error.
func (c *Client) Remove(ctx context.Context, path string) error {
	if _, err := c.files.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: path})); err != nil {
		return wrapCallError("remove "+path, err)
	}
	return nil
}

// UploadOptions tunes Upload.
type UploadOptions struct {
	// Metadata becomes the file's user.e2b.* extended attributes.
	Metadata map[string]string
}

// Upload streams r into the file at path, replacing it and creating parents.
// Memory is bounded whatever r's size. envd writes the file under a
// temporary name and renames it when complete, so a failed upload leaves any
// previous file intact.
func (c *Client) Upload(ctx context.Context, path string, r io.Reader, opts UploadOptions) error {
	v, err := c.Version(ctx)
	if err != nil {
		return err
	}
	q := url.Values{"path": {path}}
	if c.opts.user != "" {
		q.Set("username", c.opts.user)
	}
	u := c.base.String() + "/files?" + q.Encode()
	body := r
	contentType := "application/octet-stream"
	var pw *io.PipeWriter
	if !atLeast(v, versionOctetUpload) {
		// Older envd: the same stream wrapped in one multipart part.
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		mw := multipart.NewWriter(pw)
		contentType = mw.FormDataContentType()
		body = pr
		go func() {
			part, err := mw.CreateFormFile("file", path)
			if err == nil {
				_, err = io.Copy(part, r)
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, body)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	req.Header.Set("Content-Type", contentType)
	for k, v := range opts.Metadata {
		req.Header.Set("X-Metadata-"+k, v)
	}
	resp, err := c.http.Do(req)
	if pw != nil {
		pw.CloseWithError(errors.New("upload ended"))
	}
	if err != nil {
		return transportError(ctx, fmt.Errorf("upload %s: %w", path, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return responseError(resp)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return nil
}

// Download is an open file body from envd.
type Download struct {
	io.ReadCloser
	// Size is the whole file's size in bytes (not only the range), or -1.
	Size int64
	// Offset is where the body starts in the file.
	Offset int64
}

// Download opens the file at path for reading.
func (c *Client) Download(ctx context.Context, path string) (*Download, error) {
	return c.DownloadRange(ctx, path, 0, -1)
}

// DownloadRange opens length bytes of the file at path from offset (length
// < 0: to the end). An offset at or past the end gives an empty body.
func (c *Client) DownloadRange(ctx context.Context, path string, offset, length int64) (*Download, error) {
	q := url.Values{"path": {path}}
	if c.opts.user != "" {
		q.Set("username", c.opts.user)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.String()+"/files?"+q.Encode(), nil)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	ranged := offset > 0 || length >= 0
	if ranged {
		if length == 0 {
			// An empty range is not expressible in HTTP; ask for one byte and
			// return none of it, to learn the size.
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset))
		} else if length > 0 {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset+length-1))
		} else {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(ctx, fmt.Errorf("download %s: %w", path, err))
	}
	switch resp.StatusCode {
	case http.StatusOK:
		d := &Download{ReadCloser: resp.Body, Size: resp.ContentLength}
		if ranged {
			// The server ignored the range: skip to offset ourselves.
			if _, err := io.CopyN(io.Discard, resp.Body, offset); err != nil && !errors.Is(err, io.EOF) {
				resp.Body.Close()
				return nil, transportError(ctx, err)
			}
			d.Offset = offset
			if length >= 0 {
				d.ReadCloser = limitedBody{io.LimitReader(resp.Body, length), resp.Body}
			}
		}
		return d, nil
	case http.StatusPartialContent:
		start, size := parseContentRange(resp.Header.Get("Content-Range"))
		d := &Download{ReadCloser: resp.Body, Size: size, Offset: start}
		if length == 0 {
			d.ReadCloser = limitedBody{io.LimitReader(resp.Body, 0), resp.Body}
		}
		return d, nil
	case http.StatusRequestedRangeNotSatisfiable:
		_, size := parseContentRange(resp.Header.Get("Content-Range"))
		resp.Body.Close()
		return &Download{ReadCloser: io.NopCloser(strings.NewReader("")), Size: size, Offset: offset}, nil
	}
	defer resp.Body.Close()
	return nil, responseError(resp)
}

type limitedBody struct {
	io.Reader
	io.Closer
}

// parseContentRange reads "bytes a-b/size" or "bytes */size".
func parseContentRange(h string) (start, size int64) {
	start, size = 0, -1
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return
	}
	rng, total, ok := strings.Cut(rest, "/")
	if !ok {
		return
	}
	if n, err := strconv.ParseInt(total, 10, 64); err == nil {
		size = n
	}
	if a, _, ok := strings.Cut(rng, "-"); ok {
		if n, err := strconv.ParseInt(a, 10, 64); err == nil {
			start = n
		}
	}
	return
}

// EventType is the kind of a filesystem event.
type EventType int

// The event kinds envd reports.
const (
	EventUnknown EventType = iota
	EventCreate
	EventWrite
	EventRemove
	EventRename
	EventChmod
)

func (t EventType) String() string {
	return [...]string{"unknown", "create", "write", "remove", "rename", "chmod"}[t]
}

// FileEvent is one change in a watched directory.
type FileEvent struct {
	Name  string // relative to the watched directory
	Type  EventType
	Entry *Entry // set when asked for and envd attached it
}

// Watcher streams a directory's events. Close it when done.
type Watcher struct {
	events chan FileEvent
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Events delivers events until the watch ends; then it is closed and Err says
// why.
func (w *Watcher) Events() <-chan FileEvent { return w.events }

// Err returns why the watch ended (nil after Close).
func (w *Watcher) Err() error {
	<-w.done
	return w.err
}

// Close ends the watch.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
}

// WatchOptions configures Watch. The zero value watches the directory alone
// and reports names only.
type WatchOptions struct {
	// Recursive watches subdirectories too.
	Recursive bool
	// IncludeEntry asks envd to attach the changed entry (FileEvent.Entry).
	IncludeEntry bool
}

// Watch streams events for the directory at path (and its subdirectories when
// opts.Recursive). It returns once envd confirmed the watch.
func (c *Client) Watch(ctx context.Context, path string, opts WatchOptions) (*Watcher, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// The call is made in the goroutine that waits for the start event (envd
	// answers it only with that event), so ctx is heeded meanwhile.
	var (
		stream  *connect.ServerStreamForClient[filesystem.WatchDirResponse]
		err     error
		started = make(chan struct{})
	)
	go func() {
		defer close(started)
		req := connect.NewRequest(&filesystem.WatchDirRequest{Path: path, Recursive: opts.Recursive, IncludeEntry: opts.IncludeEntry})
		c.streamHeaders(req.Header())
		stream, err = c.files.WatchDir(wctx, req)
		switch {
		case err != nil:
			stream = nil
		case !stream.Receive():
			err = firstErr(stream.Err(), &StreamCutError{What: "watch stream"})
		case stream.Msg().GetStart() == nil:
			err = connect.NewError(connect.CodeInternal, errors.New("envd sent a watch event before the start event"))
		}
	}()
	select {
	case <-started:
	case <-ctx.Done():
		cancel()
		// Whether or not the watch started as the caller gave up, it is
		// closed below; only wait for the goroutine to be done with it.
		<-started
		if stream != nil {
			stream.Close()
		}
		return nil, connect.NewError(codeForContext(ctx.Err()), ctx.Err())
	}
	if err != nil {
		cancel()
		if stream != nil {
			stream.Close()
		}
		return nil, wrapCallError("watch "+path, err)
	}
	w := &Watcher{events: make(chan FileEvent, 256), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer close(w.events)
		defer stream.Close()
		for stream.Receive() {
			fe := stream.Msg().GetFilesystem()
			if fe == nil {
				continue // keepalive
			}
			ev := FileEvent{Name: fe.GetName(), Type: EventType(fe.GetType())}
			if fe.GetType() < filesystem.EventType_EVENT_TYPE_UNSPECIFIED || fe.GetType() > filesystem.EventType_EVENT_TYPE_CHMOD {
				ev.Type = EventUnknown
			}
			if fe.Entry != nil {
				e := entryFrom(fe.GetEntry())
				ev.Entry = &e
			}
			select {
			case w.events <- ev:
			case <-wctx.Done():
				return
			}
		}
		if wctx.Err() == nil {
			w.err = firstErr(stream.Err(), &StreamCutError{What: "watch stream"})
		}
	}()
	return w, nil
}

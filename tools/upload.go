package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// tmpMarker is part of every temporary name an upload batch creates, so a
// leftover (from a crash of the server mid-call) is recognisable.
const tmpMarker = ".sandbox-mcp-tmp-"

// cleanupTimeout bounds the removal of temporaries after a failure, which
// runs even when the call's context was cancelled.
const cleanupTimeout = 10 * time.Second

// uploadItem is one file of an upload batch.
type uploadItem struct {
	// dest is the absolute sandbox path to write, with symlinks already
	// resolved (a link at the destination keeps pointing at the new file).
	dest string
	// shown names the file in messages and results (workspace-relative).
	shown string
	// field names the argument the file came from, for errors.
	field string
	// open returns the content; it is called once, when the file is sent.
	open func() (io.ReadCloser, error)
	// mode, when hasMode, is given to the file after it is in place.
	mode    fs.FileMode
	hasMode bool
}

// uploadResult is what became of one uploadItem.
type uploadResult struct {
	bytes int64
	mode  fs.FileMode
}

// uploadBatch writes files all-or-nothing: every file goes to a temporary
// name beside its destination first, and only when all uploads succeeded
// are they renamed into place; a failure before that removes the
// temporaries and any directory the batch created, so nothing changed.
// Modes are applied afterwards with one chmod per distinct mode (envd has no
// chmod RPC). A replaced file keeps its previous mode unless a mode is given.
type uploadBatch struct {
	c *Call
	// r resolved the destinations; what it saw of them is not asked again.
	r     *pathResolver
	items []uploadItem
	// fresh says no destination exists yet (they all lie under a directory
	// that is missing), which saves a Stat per file.
	fresh bool
	// progress, when set, is told how many files were uploaded so far.
	progress func(done int)
	// beforeMove, when set, runs after every upload and before the first
	// rename; an error from it aborts the batch with nothing changed.
	beforeMove func(ctx context.Context) error

	prevMode []fs.FileMode // mode of the file replaced, 0 when new
	newDirs  []string      // directories the uploads will create
	planned  []string      // each item's temporary name
	temps    []string      // the temporaries written (or being written), "" once moved
	journal  string        // the batch's journal in the sandbox (putjournal.go), "" when none
}

// run performs the batch. Errors come back through c.Check; an error before
// the renames means nothing was changed, and the message says so.
func (b *uploadBatch) run(ctx context.Context) ([]uploadResult, error) {
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	defer b.dropJournal()
	b.temps = make([]string, len(b.items))
	b.planned = make([]string, len(b.items))
	for i, it := range b.items {
		b.planned[i] = tempName(it.dest, tmpMarker)
	}
	if err := b.writeJournal(ctx, phaseUpload, nil); err != nil {
		return nil, b.abort(err, "recording the write journal failed")
	}
	for i := range b.items {
		if err := b.upload(ctx, i); err != nil {
			return nil, b.abort(err, fmt.Sprintf("writing %s failed", b.items[i].shown))
		}
		if b.progress != nil {
			b.progress(i + 1)
		}
		maybeCrash(phaseUpload, i+1)
	}
	// From here on a crash is rolled forward: the journal says which
	// temporaries go where, with the modes applyModes would give them.
	if err := b.writeJournal(ctx, phaseRename, b.finalModes()); err != nil {
		return nil, b.abort(err, "recording the write journal failed")
	}
	if b.beforeMove != nil {
		if err := b.beforeMove(ctx); err != nil {
			return nil, b.abort(err, "checking before moving the files into place failed")
		}
	}
	results := make([]uploadResult, len(b.items))
	for i, it := range b.items {
		e, err := b.r.cli.Move(ctx, b.temps[i], it.dest)
		if err != nil {
			err = b.c.Check(err)
			if isLost(err) {
				return nil, err
			}
			b.removeTemps(i)
			return nil, b.partialError(i, err)
		}
		b.temps[i] = ""
		results[i].mode = fs.FileMode(e.Mode)
		results[i].bytes = e.Size
		maybeCrash(phaseRename, i+1)
	}
	if err := b.applyModes(ctx, results); err != nil {
		return nil, err
	}
	return results, nil
}

// finalModes returns the mode each file is to have once in place (the one
// asked for, else the one of the file it replaces; 0 keeps the upload's).
func (b *uploadBatch) finalModes() []fs.FileMode {
	modes := make([]fs.FileMode, len(b.items))
	for i, it := range b.items {
		switch {
		case it.hasMode:
			modes[i] = it.mode
		case b.prevMode[i] != 0:
			modes[i] = b.prevMode[i]
		}
	}
	return modes
}

// prepare checks every destination: not a directory or special file, and
// records the mode of files about to be replaced and the directories the
// uploads will create (removed again on failure).
func (b *uploadBatch) prepare(ctx context.Context) error {
	b.prevMode = make([]fs.FileMode, len(b.items))
	if b.fresh {
		if len(b.items) > 0 {
			top, err := b.missingTop(ctx, b.items[0].field, path.Dir(b.items[0].dest))
			if err != nil {
				return err
			}
			b.addNewDir(top)
		}
		return nil
	}
	for i, it := range b.items {
		e, exists, err := b.r.stat(ctx, it.dest)
		switch {
		case err != nil:
			return b.c.Check(err)
		case !exists:
			top, err := b.missingTop(ctx, it.field, path.Dir(it.dest))
			if err != nil {
				return err
			}
			b.addNewDir(top)
		case e.Type == envdclient.TypeDir:
			return inputErr(it.field, "%s is a directory; give the path of a file inside it", it.shown)
		case e.Type != envdclient.TypeFile:
			return inputErr(it.field, "%s exists and is not a regular file (%s); remove it first", it.shown, e.Permissions)
		default:
			b.prevMode[i] = fs.FileMode(e.Mode)
		}
	}
	return nil
}

// missingTop returns the highest missing directory on the way to dir ("" when
// dir exists), failing when an existing component is not a directory.
func (b *uploadBatch) missingTop(ctx context.Context, field, dir string) (string, error) {
	top := ""
	for d := dir; d != "/" && d != "."; d = path.Dir(d) {
		e, exists, err := b.r.stat(ctx, d)
		if err != nil {
			return "", b.c.Check(err)
		}
		if !exists {
			top = d
			continue
		}
		if e.Type != envdclient.TypeDir {
			return "", inputErr(field, "cannot create files under %s: it is not a directory", b.r.rel(d))
		}
		break
	}
	return top, nil
}

func (b *uploadBatch) addNewDir(dir string) {
	if dir == "" || slices.Contains(b.newDirs, dir) {
		return
	}
	b.newDirs = append(b.newDirs, dir)
}

// upload sends item i to its temporary name.
func (b *uploadBatch) upload(ctx context.Context, i int) error {
	it := b.items[i]
	r, err := it.open()
	if err != nil {
		return fmt.Errorf("reading the content of %s: %w", it.shown, err)
	}
	defer r.Close()
	tmp := b.planned[i]
	b.temps[i] = tmp
	return b.c.Check(b.r.cli.Upload(ctx, tmp, r, envdclient.UploadOptions{}))
}

// abort removes what the batch created and returns err explained.
func (b *uploadBatch) abort(err error, what string) error {
	if isLost(err) {
		b.journal = "" // the sandbox is gone with the temporaries and the journal
		return err
	}
	b.removeTemps(0)
	for _, d := range b.newDirs {
		b.remove(d)
	}
	var ie *InputError
	if errors.As(err, &ie) {
		return err
	}
	return batchFailure(b.r.root, what+"; nothing was changed", err)
}

// removeTemps removes the temporaries from index from on.
func (b *uploadBatch) removeTemps(from int) {
	for _, t := range b.temps[from:] {
		if t != "" {
			b.remove(t)
		}
	}
}

func (b *uploadBatch) remove(p string) { removeQuietly(b.c, b.r.cli, p) }

// removeQuietly deletes p in the sandbox, even when the call's context
// ended, logging a failure (it only cleans up after another failure).
func removeQuietly(c *Call, cli *envdclient.Client, p string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := cli.Remove(ctx, p); err != nil {
		c.d.Logger.Warn("could not remove a temporary after a failed operation", "tool", c.tool, "path", p, "err", err)
	}
}

// applyModes gives files the mode asked for, or back the mode of the file
// they replaced, with one chmod per distinct mode.
func (b *uploadBatch) applyModes(ctx context.Context, results []uploadResult) error {
	groups := map[fs.FileMode][]string{}
	var order []fs.FileMode
	for i, it := range b.items {
		want, set := it.mode, it.hasMode
		if !set && b.prevMode[i] != 0 {
			want, set = b.prevMode[i], true
		}
		if !set || want == results[i].mode {
			continue
		}
		if _, ok := groups[want]; !ok {
			order = append(order, want)
		}
		groups[want] = append(groups[want], it.dest)
		results[i].mode = want
	}
	for _, mode := range order {
		args := append([]string{octalMode(mode), "--"}, groups[mode]...)
		res, err := b.r.cli.Run(ctx, envdclient.Command{Cmd: "chmod", Args: args}, envdclient.RunOptions{StdoutLimit: -1, StderrLimit: 4 << 10})
		if err != nil {
			err = b.c.Check(err)
			if isLost(err) {
				return err
			}
			return batchFailure(b.r.root, "the files were written, but setting their modes failed", err)
		}
		if res.ExitCode != 0 {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("the files were written, but setting their modes failed: chmod %s exited with status %d: %s",
				octalMode(mode), res.ExitCode, relText(b.r.root, strings.TrimSpace(string(res.Stderr.Bytes())))))
		}
	}
	return nil
}

// partialError reports rename i failing after the renames before it
// succeeded (renames beside the destination rarely fail, but they can).
func (b *uploadBatch) partialError(i int, err error) error {
	failed := b.items[i].shown
	if i == 0 {
		for _, d := range b.newDirs {
			b.remove(d)
		}
		return batchFailure(b.r.root, fmt.Sprintf("moving %s into place failed; nothing was changed", failed), err)
	}
	names := make([]string, i)
	for k, it := range b.items[:i] {
		names[k] = it.shown
	}
	return batchFailure(b.r.root, fmt.Sprintf("moving %s into place failed after %d file(s) were already written (%s); the others were not changed",
		failed, i, strings.Join(names, ", ")), err)
}

// batchFailure wraps err, an envd failure inside a batch, with msg saying
// what was (not) changed. The Connect code is kept, so describeError renders
// it with the right wording; paths are made workspace-relative.
func batchFailure(root, msg string, err error) error {
	return connect.NewError(connect.CodeOf(err), errors.New(relText(root, msg+": "+rootCause(err))))
}

// tempName returns a fresh temporary name beside dest (a slash path),
// recognisable by marker.
func tempName(dest, marker string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	base := path.Base(dest)
	if len(base) > 100 {
		base = base[:100] // leave room under NAME_MAX for the suffix
	}
	return path.Join(path.Dir(dest), "."+base+marker+hex.EncodeToString(b[:]))
}

// octalMode formats a mode as four octal digits ("0755").
func octalMode(m fs.FileMode) string { return fmt.Sprintf("%04o", uint32(m)) }

// parseMode reads an octal mode such as "755", "0755" or "0o755".
func parseMode(field, s string) (fs.FileMode, error) {
	digits := strings.TrimPrefix(s, "0o")
	if len(digits) < 3 || len(digits) > 4 {
		return 0, inputErr(field, "mode %q is not an octal mode such as 644, 0755 or 0o600", s)
	}
	n, err := strconv.ParseUint(digits, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, inputErr(field, "mode %q is not an octal mode such as 644, 0755 or 0o600", s)
	}
	return fs.FileMode(n), nil
}

// isLost reports whether err is a lost sandbox, which must reach the model
// as it is, with its notice.
func isLost(err error) bool { return manage.IsLost(err) }

// relText rewrites absolute sandbox paths under root in an envd message as
// workspace-relative ones (the model only ever sees those).
func relText(root, msg string) string {
	root = path.Clean(root)
	if root == "/" {
		return msg
	}
	return strings.ReplaceAll(strings.ReplaceAll(msg, root+"/", ""), root, ".")
}

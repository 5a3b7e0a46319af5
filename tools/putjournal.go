package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// An upload batch (put_files, stage_inputs) keeps a journal in the sandbox
// while it runs, so that a server killed in the middle leaves nothing half
// done: the next call on the workspace, from whichever server process,
// rolls the batch forward (every file moved into place) when its renames
// had begun, and back (temporaries and the directories it made removed)
// when they had not. The journal lives in the workspace, written through
// envd like the files themselves, so it works on every provider and goes
// wherever the sandbox goes; the sandbox can write it too, so every path in
// it is checked by the same rules as the model's paths before anything is
// renamed or removed.
const (
	// journalDir is the journals' directory, relative to the workspace.
	journalDir = ".sandbox-mcp"
	// journalPrefix and journalSuffix frame a journal's name.
	journalPrefix = "batch-"
	journalSuffix = ".journal"
	// maxJournalBytes bounds the journal read back (a batch of 1000 files
	// with paths of 4 KiB stays under it).
	maxJournalBytes = 16 << 20
)

// Journal phases.
const (
	phaseUpload = "upload" // temporaries are being written: roll back
	phaseRename = "rename" // every upload succeeded: roll forward
)

// batchJournal is a journal file's content. Paths are workspace-relative.
type batchJournal struct {
	Tool    string        `json:"tool"`
	Phase   string        `json:"phase"`
	Files   []journalFile `json:"files"`
	NewDirs []string      `json:"new_dirs,omitempty"`
}

type journalFile struct {
	Dest string `json:"dest"`
	Temp string `json:"temp"`
	// Mode is the mode the file gets once in place ("" keeps the upload's).
	Mode string `json:"mode,omitempty"`
}

// journalPath returns the path of the batch's journal, made on first use.
func (b *uploadBatch) journalPath() string {
	if b.journal == "" {
		var buf [8]byte
		_, _ = rand.Read(buf[:])
		b.journal = path.Join(b.r.root, journalDir, journalPrefix+hex.EncodeToString(buf[:])+journalSuffix)
	}
	return b.journal
}

// writeJournal records phase and the batch's plan, replacing the journal
// atomically (written beside it, then renamed over it).
func (b *uploadBatch) writeJournal(ctx context.Context, phase string, modes []fs.FileMode) error {
	j := batchJournal{Tool: b.c.tool, Phase: phase, Files: make([]journalFile, len(b.items))}
	for i, it := range b.items {
		j.Files[i] = journalFile{Dest: b.r.rel(it.dest), Temp: b.r.rel(b.planned[i])}
		if modes != nil && modes[i] != 0 {
			j.Files[i].Mode = octalMode(modes[i])
		}
	}
	for _, d := range b.newDirs {
		j.NewDirs = append(j.NewDirs, b.r.rel(d))
	}
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	dst := b.journalPath()
	if err := b.checkJournalDir(ctx); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := b.c.Check(b.r.cli.Upload(ctx, tmp, strings.NewReader(string(data)), envdclient.UploadOptions{})); err != nil {
		return err
	}
	_, err = b.r.cli.Move(ctx, tmp, dst)
	return b.c.Check(err)
}

// checkJournalDir refuses to journal through a journal directory the
// sandbox replaced with a symlink or a file.
func (b *uploadBatch) checkJournalDir(ctx context.Context) error {
	dir := path.Join(b.r.root, journalDir)
	e, exists, err := b.r.stat(ctx, dir)
	if err != nil {
		return b.c.Check(err)
	}
	if exists && e.Type != envdclient.TypeDir {
		return inputErr("files", "%s in the workspace is not a directory (the server keeps its write journals there); remove it", journalDir)
	}
	return nil
}

// dropJournal removes the batch's journal once the batch is done (or
// cleaned up after a failure).
func (b *uploadBatch) dropJournal() {
	if b.journal != "" {
		b.remove(b.journal)
		b.journal = ""
	}
}

// journalRecovery runs the recovery of each sandbox once per process,
// before the first call that leases it; concurrent first calls wait for it.
type journalRecovery struct {
	mu   sync.Mutex
	done map[string]*sync.Once // by sandbox id and generation
}

// recoverJournals completes or undoes the batches a previous server left
// half done in the leased sandbox, and adds a notice saying what became of
// each. Failures are logged: they never fail the call that triggered them.
func (c *Call) recoverJournals(ctx context.Context, l *manage.Lease) {
	jr := &c.d.journals
	key := l.Sandbox.ID + "/" + strconv.FormatInt(l.Generation, 10)
	jr.mu.Lock()
	if jr.done == nil {
		jr.done = map[string]*sync.Once{}
	}
	once, ok := jr.done[key]
	if !ok {
		once = &sync.Once{}
		jr.done[key] = once
	}
	jr.mu.Unlock()
	once.Do(func() {
		r := newPathResolver(c, l.Sandbox.Workdir, l.Client)
		dir := path.Join(r.root, journalDir)
		if e, exists, err := r.stat(ctx, dir); err != nil || !exists || e.Type != envdclient.TypeDir {
			return
		}
		entries, err := l.Client.ListDir(ctx, dir, 1)
		if err != nil {
			c.d.Logger.Warn("could not look for interrupted write journals", "workspace", c.ws.Key, "err", err)
			return
		}
		for _, e := range entries {
			switch {
			case !strings.HasPrefix(e.Name, journalPrefix):
			case strings.HasSuffix(e.Name, journalSuffix+".tmp"):
				removeQuietly(c, l.Client, e.Path) // a journal never completed: its batch had not begun
			case strings.HasSuffix(e.Name, journalSuffix) && e.Type == envdclient.TypeFile:
				if n := c.replayJournal(ctx, r, path.Join(dir, e.Name), e.Size); n != "" {
					c.notices = append(c.notices, n)
				}
			}
		}
	})
}

// replayJournal rolls one journal forward or back and returns the notice
// for the model ("" when nothing is to be said).
func (c *Call) replayJournal(ctx context.Context, r *pathResolver, jpath string, size int64) string {
	defer removeQuietly(c, r.cli, jpath)
	var j batchJournal
	err := errors.New("too large")
	if size <= maxJournalBytes {
		err = c.readJournal(ctx, r.cli, jpath, &j)
	}
	if err == nil {
		err = r.checkJournal(ctx, &j)
	}
	if err != nil {
		c.d.Logger.Warn("ignored a write journal that is not valid (made or changed inside the sandbox?)", "workspace", c.ws.Key, "journal", jpath, "err", err)
		return ""
	}
	tool := j.Tool
	if tool == "" {
		tool = "put_files"
	}
	if j.Phase == phaseUpload {
		for _, f := range j.Files {
			if _, exists, err := r.stat(ctx, path.Join(r.root, f.Temp)); err == nil && exists {
				removeQuietly(c, r.cli, path.Join(r.root, f.Temp))
			}
		}
		for _, d := range j.NewDirs {
			c.removeEmptyDirs(ctx, r, path.Join(r.root, d))
		}
		return fmt.Sprintf("An earlier %s call of %d file(s) was interrupted (the server stopped) before any file was moved into place: it was undone, none of its files were written, and its temporary files were removed. Run it again if you still need it.", tool, len(j.Files))
	}
	groups := map[string][]string{}
	var order []string
	for _, f := range j.Files {
		temp, dest := path.Join(r.root, f.Temp), path.Join(r.root, f.Dest)
		if _, exists, err := r.stat(ctx, temp); err == nil && exists {
			if _, err := r.cli.Move(ctx, temp, dest); err != nil {
				c.d.Logger.Warn("could not complete an interrupted write", "workspace", c.ws.Key, "path", f.Dest, "err", err)
				return fmt.Sprintf("An earlier %s call was interrupted (the server stopped) while moving its files into place, and completing it failed at %s (%s): check these files before relying on them: %s.", tool, f.Dest, rootCause(err), journalNames(j.Files))
			}
		}
		if f.Mode != "" {
			if _, ok := groups[f.Mode]; !ok {
				order = append(order, f.Mode)
			}
			groups[f.Mode] = append(groups[f.Mode], dest)
		}
	}
	for _, mode := range order {
		args := append([]string{mode, "--"}, groups[mode]...)
		if _, err := r.cli.Run(ctx, envdclient.Command{Cmd: "chmod", Args: args}, envdclient.RunOptions{StdoutLimit: -1, StderrLimit: 4 << 10}); err != nil {
			c.d.Logger.Warn("could not set modes after completing an interrupted write", "workspace", c.ws.Key, "err", err)
		}
	}
	return fmt.Sprintf("An earlier %s call was interrupted (the server stopped) while moving its files into place; it was completed: all %d file(s) are written (%s).", tool, len(j.Files), journalNames(j.Files))
}

// journalNames lists a journal's destinations for a notice, at most ten.
func journalNames(files []journalFile) string {
	var names []string
	for i, f := range files {
		if i == 10 {
			names = append(names, fmt.Sprintf("and %d more", len(files)-10))
			break
		}
		names = append(names, f.Dest)
	}
	return strings.Join(names, ", ")
}

// readJournal downloads and decodes the journal at p.
func (c *Call) readJournal(ctx context.Context, cli *envdclient.Client, p string, j *batchJournal) error {
	d, err := cli.Download(ctx, p)
	if err != nil {
		return err
	}
	defer d.Close()
	data, err := io.ReadAll(io.LimitReader(d, maxJournalBytes+1))
	if err != nil {
		return err
	}
	if len(data) > maxJournalBytes {
		return errors.New("too large")
	}
	return json.Unmarshal(data, j)
}

// checkJournal holds every path of a journal to the rules of the model's
// own paths, and more: inside the workspace, through no symlink (each path
// is its own resolved path), each temporary a name this server makes beside
// its destination, and every mode an octal mode. A journal the sandbox
// wrote can then make the server rename or remove nothing it could not
// have been asked to by the model, and never a file that is not one of
// its temporaries.
func (r *pathResolver) checkJournal(ctx context.Context, j *batchJournal) error {
	if j.Phase != phaseUpload && j.Phase != phaseRename {
		return fmt.Errorf("unknown phase %q", j.Phase)
	}
	if len(j.Files) == 0 || len(j.Files) > maxPutFiles {
		return fmt.Errorf("%d files", len(j.Files))
	}
	own := func(rel string) (string, error) {
		if rel == "" || path.IsAbs(rel) {
			return "", fmt.Errorf("path %q is not workspace-relative", rel)
		}
		abs, err := r.lexical("journal", rel)
		if err != nil {
			return "", err
		}
		if abs == r.root || path.Clean(rel) != rel {
			return "", fmt.Errorf("path %q is not a clean path below the workspace", rel)
		}
		real, err := r.follow(ctx, "journal", rel, abs)
		if err != nil {
			return "", err
		}
		if real != abs {
			return "", fmt.Errorf("path %q goes through a symlink", rel)
		}
		return abs, nil
	}
	for _, f := range j.Files {
		dest, err := own(f.Dest)
		if err != nil {
			return err
		}
		temp, err := own(f.Temp)
		if err != nil {
			return err
		}
		if !isTempOf(temp, dest) {
			return fmt.Errorf("%q is not a temporary name of %q", f.Temp, f.Dest)
		}
		if f.Mode != "" {
			if _, err := parseMode("mode", f.Mode); err != nil {
				return err
			}
		}
	}
	for _, d := range j.NewDirs {
		if _, err := own(d); err != nil {
			return err
		}
	}
	return nil
}

// isTempOf reports whether temp is a name tempName makes for dest.
func isTempOf(temp, dest string) bool {
	if path.Dir(temp) != path.Dir(dest) {
		return false
	}
	base := path.Base(dest)
	if len(base) > 100 {
		base = base[:100]
	}
	suffix, ok := strings.CutPrefix(path.Base(temp), "."+base+tmpMarker)
	if !ok || len(suffix) != 12 {
		return false
	}
	_, err := hex.DecodeString(suffix)
	return err == nil
}

// removeEmptyDirs removes dir and the directories below it that are empty
// (a rolled-back batch's new directories, which other writes may have used
// meanwhile), not following symlinks.
func (c *Call) removeEmptyDirs(ctx context.Context, r *pathResolver, dir string) {
	res, err := r.cli.Run(ctx, envdclient.Command{Cmd: "find", Args: []string{"-P", dir, "-depth", "-type", "d", "-empty", "-delete"}},
		envdclient.RunOptions{StdoutLimit: -1, StderrLimit: 4 << 10})
	if err != nil || res.ExitCode != 0 {
		c.d.Logger.Warn("could not remove the directories of an undone write", "workspace", c.ws.Key, "dir", dir, "err", err)
	}
}

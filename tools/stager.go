package tools

import (
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// workspaceCopyListDepth is how deep stage_inputs lists a workspace
// directory it copies, to count its files.
const workspaceCopyListDepth = 256

// stager performs the plans of one stage_inputs call in the sandbox.
type stager struct {
	c    *Call
	cli  *envdclient.Client
	root string        // the workspace root in the sandbox
	r    *pathResolver // the current input's
	// progress, when set, reports the files uploaded in the whole call
	// (see progressReporter); uploaded counts those of the inputs before.
	progress func(done int)
	uploaded int
}

// stage performs one plan. Its paths are resolved afresh: the inputs before
// it changed the workspace.
func (s *stager) stage(ctx context.Context, p stagePlan) (stagedInput, error) {
	s.r = newPathResolver(s.c, s.root, s.cli)
	if p.tree != nil {
		return s.stageTree(ctx, p)
	}
	return s.stageWorkspace(ctx, p)
}

// stageTree uploads a host or artifact tree as one all-or-nothing batch.
func (s *stager) stageTree(ctx context.Context, p stagePlan) (stagedInput, error) {
	t := p.tree
	toField := p.field + ".to"
	to, err := s.r.resolve(ctx, toField, p.to)
	if err != nil {
		return stagedInput{}, err
	}
	toAbs, toReal := to.abs, to.real
	var toType envdclient.FileType
	if to.exists {
		toType = to.entry.Type
	}
	if !t.isDir && toType == envdclient.TypeDir {
		// A file staged onto a directory goes inside it.
		toAbs = path.Join(toAbs, path.Base(t.rel))
		toReal, toType = path.Join(toReal, path.Base(t.rel)), envdclient.TypeUnknown
		e, exists, err := s.r.stat(ctx, toReal)
		if err != nil {
			return stagedInput{}, s.c.Check(err)
		}
		if exists {
			toType = e.Type
		}
	}
	if t.isDir && toType != envdclient.TypeUnknown && toType != envdclient.TypeDir {
		return stagedInput{}, inputErr(toField, "%q exists and is not a directory; give another destination for the directory %s", s.r.rel(toAbs), p.spec.From)
	}
	if !t.isDir && toAbs == s.r.root {
		return stagedInput{}, inputErr(toField, "the workspace root cannot be replaced by a file; give a file path")
	}
	fresh := toType == envdclient.TypeUnknown
	items, total, err := s.treeItems(ctx, t, toField, toAbs, toReal, fresh)
	if err != nil {
		return stagedInput{}, err
	}
	if len(items) > 0 {
		batch := &uploadBatch{c: s.c, r: s.r, items: items, fresh: fresh}
		if s.progress != nil {
			before := s.uploaded
			batch.progress = func(done int) { s.progress(before + done) }
		}
		results, err := batch.run(ctx)
		if err != nil {
			return stagedInput{}, err
		}
		s.uploaded += len(items)
		total = 0
		for _, r := range results {
			total += r.bytes
		}
	}
	if t.isDir {
		if err := s.makeTreeDirs(ctx, t, toReal); err != nil {
			return stagedInput{}, err
		}
	}
	return stagedInput{From: p.spec.From, To: s.r.rel(toAbs), Mode: "copy", Files: len(items), Bytes: total}, nil
}

// treeItems plans the upload of t's files to toAbs (shown) and toReal
// (written), and returns their total size as scanned. Below a destination
// that exists (not fresh) each path is resolved, as symlinks may be there.
func (s *stager) treeItems(ctx context.Context, t *hostTree, toField, toAbs, toReal string, fresh bool) ([]uploadItem, int64, error) {
	items := make([]uploadItem, len(t.files))
	var total int64
	for i, f := range t.files {
		shownAbs, dest := toAbs, toReal
		if f.rel != "" {
			shownAbs = path.Join(toAbs, f.rel)
			dest = path.Join(toReal, f.rel)
			if !fresh {
				res, err := s.r.resolve(ctx, toField, s.r.rel(shownAbs))
				if err != nil {
					return nil, 0, err
				}
				dest = res.real
			}
		}
		items[i] = uploadItem{
			dest: dest, shown: s.r.rel(shownAbs), field: toField,
			open: func() (io.ReadCloser, error) { return t.open(f) },
			mode: f.mode, hasMode: true,
		}
		total += f.size
	}
	return items, total, nil
}

// makeTreeDirs creates the empty directories of the directory tree t below
// toReal, and toReal itself when t holds no file.
func (s *stager) makeTreeDirs(ctx context.Context, t *hostTree, toReal string) error {
	dirs := t.emptyDirs()
	if len(t.files) == 0 {
		dirs = append([]string{"."}, dirs...)
	}
	for _, d := range dirs {
		if _, err := s.cli.MakeDir(ctx, path.Join(toReal, d)); err != nil {
			return s.c.Check(err)
		}
	}
	return nil
}

// stageWorkspace copies or links a path inside the workspace.
func (s *stager) stageWorkspace(ctx context.Context, p stagePlan) (stagedInput, error) {
	fromField, toField := p.field+".from", p.field+".to"
	from, err := s.r.resolve(ctx, fromField, p.wsSrc)
	if err != nil {
		return stagedInput{}, err
	}
	srcAbs, srcReal, src := from.abs, from.real, from.entry
	if srcAbs == s.r.root {
		return stagedInput{}, inputErr(fromField, "%q is the workspace root, which cannot be staged into itself", p.spec.From)
	}
	if !from.exists {
		return stagedInput{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("%s does not exist", p.spec.From))
	}
	to, err := s.r.resolve(ctx, toField, p.to)
	if err != nil {
		return stagedInput{}, err
	}
	toAbs, toReal := to.abs, to.real
	if toAbs == srcAbs {
		return stagedInput{}, inputErr(toField, "%q is the source itself; give a different destination", p.to)
	}
	if toAbs == s.r.root {
		return stagedInput{}, inputErr(toField, "the workspace root cannot be the destination; give a path inside it")
	}
	if p.mode == "link" {
		return s.link(ctx, p, srcAbs, toAbs)
	}
	if toReal == srcReal || strings.HasPrefix(toReal, srcReal+"/") {
		return stagedInput{}, inputErr(toField, "%q is inside the source %s; a directory cannot be copied into itself", p.to, p.spec.From)
	}
	var toType envdclient.FileType
	if to.exists {
		toType = to.entry.Type
	}
	res := stagedInput{From: p.spec.From, Mode: "copy"}
	switch src.Type {
	case envdclient.TypeFile:
		if toType == envdclient.TypeDir {
			toAbs, toReal = path.Join(toAbs, path.Base(srcAbs)), path.Join(toReal, path.Base(srcAbs))
		}
		if res.Bytes, err = s.copyFile(ctx, p.field, srcReal, toReal); err != nil {
			return stagedInput{}, err
		}
		res.Files = 1
	case envdclient.TypeDir:
		if toType != envdclient.TypeUnknown && toType != envdclient.TypeDir {
			return stagedInput{}, inputErr(toField, "%q exists and is not a directory; give another destination for the directory %s", p.to, p.spec.From)
		}
		if res.Files, res.Bytes, err = s.copyDir(ctx, p.field, srcReal, toReal); err != nil {
			return stagedInput{}, err
		}
	default:
		return stagedInput{}, inputErr(fromField, "%s is not a regular file or directory", p.spec.From)
	}
	res.To = s.r.rel(toAbs)
	return res, nil
}

// copyFile copies the workspace file srcReal to toReal, beside it first and
// then renamed into place (atomic for a file), and returns its size.
func (s *stager) copyFile(ctx context.Context, field, srcReal, toReal string) (int64, error) {
	tmp := tempName(toReal, tmpMarker)
	if err := s.ensureDir(ctx, path.Dir(toReal)); err != nil {
		return 0, err
	}
	if err := s.command(ctx, field, "cp", "-a", "--", srcReal, tmp); err != nil {
		removeQuietly(s.c, s.cli, tmp)
		return 0, err
	}
	moved, err := s.cli.Move(ctx, tmp, toReal)
	if err != nil {
		removeQuietly(s.c, s.cli, tmp)
		return 0, s.c.Check(err)
	}
	return moved.Size, nil
}

// copyDir copies the workspace directory srcReal to toReal, merging into it
// when it exists, and returns the regular files and bytes it holds.
func (s *stager) copyDir(ctx context.Context, field, srcReal, toReal string) (files int, bytes int64, err error) {
	entries, err := s.cli.ListDir(ctx, srcReal, workspaceCopyListDepth)
	if err != nil {
		return 0, 0, s.c.Check(err)
	}
	for _, e := range entries {
		if e.Type == envdclient.TypeFile {
			files++
			bytes += e.Size
		}
	}
	if err := s.ensureDir(ctx, path.Dir(toReal)); err != nil {
		return 0, 0, err
	}
	// -T: the destination is the directory itself, merged into when it exists.
	if err := s.command(ctx, field, "cp", "-a", "-T", "--", srcReal, toReal); err != nil {
		return 0, 0, err
	}
	return files, bytes, nil
}

// link makes toAbs a relative symlink to srcAbs.
func (s *stager) link(ctx context.Context, p stagePlan, srcAbs, toAbs string) (stagedInput, error) {
	toField := p.field + ".to"
	parent, err := s.r.resolve(ctx, toField, s.r.rel(path.Dir(toAbs)))
	if err != nil {
		return stagedInput{}, err
	}
	parentReal := parent.real
	linkPath := path.Join(parentReal, path.Base(toAbs))
	e, exists, err := s.r.stat(ctx, linkPath)
	if err != nil {
		return stagedInput{}, s.c.Check(err)
	}
	if exists && e.Type == envdclient.TypeDir {
		return stagedInput{}, inputErr(toField, "%q is an existing directory; give a new path for the link", p.to)
	}
	target, err := filepath.Rel(parentReal, srcAbs)
	if err != nil {
		target = srcAbs
	}
	if err := s.ensureDir(ctx, parentReal); err != nil {
		return stagedInput{}, err
	}
	// -f replaces an existing file or link; -T never puts the link inside a
	// directory the old link pointed to.
	if err := s.command(ctx, p.field, "ln", "-s", "-f", "-T", "--", target, linkPath); err != nil {
		return stagedInput{}, err
	}
	return stagedInput{From: p.spec.From, To: s.r.rel(toAbs), Mode: "link", Files: 1}, nil
}

// ensureDir creates dir and its parents, unless the resolver saw it is a
// directory already.
func (s *stager) ensureDir(ctx context.Context, dir string) error {
	if e, exists, known := s.r.known(dir); known && exists && e.Type == envdclient.TypeDir {
		return nil
	}
	_, err := s.cli.MakeDir(ctx, dir)
	return s.c.Check(err)
}

// command runs argv in the sandbox (no shell) and turns a failure into an
// error quoting its stderr.
func (s *stager) command(ctx context.Context, field, name string, args ...string) error {
	res, err := s.cli.Run(ctx, envdclient.Command{Cmd: name, Args: args}, envdclient.RunOptions{StdoutLimit: -1, StderrLimit: 4 << 10})
	if err != nil {
		err = s.c.Check(err)
		if isLost(err) {
			return err
		}
		return connect.NewError(connect.CodeOf(err), fmt.Errorf("%s: running %s failed: %s", field, name, relText(s.r.root, rootCause(err))))
	}
	if res.ExitCode != 0 {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s: %s exited with status %d: %s",
			field, name, res.ExitCode, relText(s.r.root, strings.TrimSpace(string(res.Stderr.Bytes())))))
	}
	return nil
}

package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/invopop/jsonschema"

	"github.com/sandbox-mcp/sandbox-mcp/envd/client"
)

// Caps and defaults of the transfer tools.
const (
	maxStageInputs         = 50
	maxSkippedShown        = 50
	maxCollectGlobs        = 20
	defaultCollectFiles    = 100
	maxCollectFiles        = 1000
	defaultCollectBytes    = 100 << 20
	maxCollectBytes        = 4 << 30
	maxCollectDepth        = 32
	workspaceCopyListDepth = 256
)

// The schemes stage_inputs reads from.
const (
	schemeHost      = "host://"
	schemeArtifact  = "artifact://"
	schemeWorkspace = "workspace://"
)

// ------------------------------------------------------------- stage_inputs

type stageInputsInput struct {
	Inputs []stageInputSpec `json:"inputs" jsonschema:"required,minItems=1" jsonschema_description:"What to bring into the workspace (1 to 50), staged in order."`
}

// JSONSchemaExtend publishes the limits runStageInputs relies on.
func (stageInputsInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "inputs").MaxItems = schemaCount(maxStageInputs)
}

type stageInputSpec struct {
	From string `json:"from" jsonschema:"required,minLength=1" jsonschema_description:"The source: host://ROOT/path (a host directory the operator allowed; workspace_info lists the roots), artifact://NAME (a file or directory collect_outputs stored), or workspace://path (a path in this workspace)."`
	To   string `json:"to,omitempty" jsonschema_description:"Workspace-relative destination. Default: the source's base name at the workspace root. A file staged onto an existing directory goes inside it; a directory is merged into the destination directory."`
	Mode string `json:"mode,omitempty" jsonschema:"enum=copy,enum=link,default=copy" jsonschema_description:"copy (default) copies the files; link makes to a symbolic link to a workspace:// source (only for workspace://)."`
}

type stageInputsOutput struct {
	Meta
	Staged  []stagedInput `json:"staged" jsonschema_description:"One entry per input, in order."`
	Skipped []skippedFile `json:"skipped,omitempty" jsonschema_description:"Entries of host directories that were not staged (special files, symlinks leading outside or to directories), at most 50."`
}

type stagedInput struct {
	From  string `json:"from" jsonschema_description:"The source as given."`
	To    string `json:"to" jsonschema_description:"Workspace-relative destination."`
	Mode  string `json:"mode" jsonschema:"enum=copy,enum=link" jsonschema_description:"copy or link."`
	Files int    `json:"files" jsonschema_description:"Regular files written (1 for a link)."`
	Bytes int64  `json:"bytes" jsonschema_description:"Bytes written (0 for a link)."`
}

// StageInputs is the stage_inputs tool: it brings files into the workspace
// from operator-allowed host directories (Config.StageRoots), from the
// artifact store, or from elsewhere in the workspace (copy or symlink).
func StageInputs(d *Deps) Tool {
	return define(d, spec[stageInputsInput, stageInputsOutput]{
		name:  "stage_inputs",
		title: "Stage inputs",
		description: "Bring files into the workspace: from host://ROOT/path (only host directories the operator allowed; workspace_info lists them), " +
			"from artifact://NAME (files stored earlier by collect_outputs, which survive a recreated sandbox), or from workspace://path (copy, or mode link for a symbolic link). " +
			"Directories are copied recursively and merged into the destination; existing files of the same name are replaced. " +
			"Files from the host are uploaded under temporary names and moved into place only when all of an input arrived.",
		toolset:     ToolsetTransfer,
		annotations: Annotations{ReadOnly: false, Destructive: true, Idempotent: true, OpenWorld: false},
		run:         runStageInputs,
	})
}

// stagePlan is one checked input.
type stagePlan struct {
	field string // "inputs[i]"
	spec  stageInputSpec
	mode  string
	tree  *hostTree // host:// and artifact://
	wsSrc string    // workspace://: the path as given
	to    string    // the destination as given or defaulted
}

func runStageInputs(ctx context.Context, c *Call, in *stageInputsInput) (*stageInputsOutput, error) {
	// The schema checks the number of inputs and their modes.
	var roots []*os.Root
	defer func() {
		for _, r := range roots {
			r.Close()
		}
	}()
	// Check every input, and scan host trees, before touching the sandbox.
	plans := make([]stagePlan, len(in.Inputs))
	for i, s := range in.Inputs {
		p, err := planStage(c, fmt.Sprintf("inputs[%d]", i), s)
		if p != nil && p.tree != nil {
			roots = append(roots, p.tree.root)
		}
		if err != nil {
			return nil, err
		}
		plans[i] = *p
	}

	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	st := &stager{c: c, cli: lease.Client, root: lease.Sandbox.Workdir}
	out := &stageInputsOutput{Staged: []stagedInput{}}
	for _, p := range plans {
		res, err := st.stage(ctx, p)
		if err != nil {
			return nil, afterStaged(err, out.Staged)
		}
		out.Staged = append(out.Staged, res)
		if p.tree != nil {
			for _, sk := range p.tree.skip {
				if len(out.Skipped) < maxSkippedShown {
					out.Skipped = append(out.Skipped, sk)
				}
			}
		}
	}
	var skipped int
	for _, p := range plans {
		if p.tree != nil {
			skipped += len(p.tree.skip)
		}
	}
	if skipped > 0 {
		c.Notice("%d entr(ies) of the staged directories were skipped (special files, or symlinks leading outside or to directories); skipped lists %d of them.", skipped, len(out.Skipped))
	}
	return out, nil
}

// afterStaged adds to err which inputs were staged before it failed.
func afterStaged(err error, done []stagedInput) error {
	if len(done) == 0 || isLost(err) {
		return err
	}
	names := make([]string, len(done))
	for i, s := range done {
		names[i] = s.From
	}
	note := fmt.Sprintf(" (the inputs before it were staged: %s)", strings.Join(names, ", "))
	var ie *InputError
	if errors.As(err, &ie) {
		return &InputError{Field: ie.Field, Msg: ie.Msg + note}
	}
	return connect.NewError(connect.CodeOf(err), errors.New(rootCause(err)+note))
}

// planStage checks one input and, for host and artifact sources, opens and
// scans the tree.
func planStage(c *Call, field string, s stageInputSpec) (*stagePlan, error) {
	p := &stagePlan{field: field, spec: s, mode: s.Mode, to: s.To}
	if p.mode == "" {
		p.mode = "copy"
	}
	if strings.IndexByte(s.From, 0) >= 0 {
		return nil, inputErr(field+".from", "%q contains a NUL byte", s.From)
	}
	var err error
	switch {
	case strings.HasPrefix(s.From, schemeHost):
		p.tree, err = openHostInput(c.d.Config, field+".from", s.From)
	case strings.HasPrefix(s.From, schemeArtifact):
		p.tree, err = openArtifactInput(c, field+".from", s.From)
	case strings.HasPrefix(s.From, schemeWorkspace):
		p.wsSrc = strings.TrimPrefix(s.From, schemeWorkspace)
		if p.wsSrc == "" {
			return nil, inputErr(field+".from", "%q names no path; give workspace://path", s.From)
		}
		if p.to == "" {
			p.to = path.Base(path.Clean(p.wsSrc))
		}
		return p, nil
	default:
		return nil, inputErr(field+".from", "%q is not a source stage_inputs reads: use host://ROOT/path, artifact://NAME or workspace://path", s.From)
	}
	if err != nil {
		return p, err
	}
	if p.mode == "link" {
		return p, inputErr(field+".mode", "link works only for workspace:// sources (a link cannot point out of the sandbox); use copy")
	}
	if p.to == "" {
		p.to = path.Base(p.tree.rel)
		if p.tree.rel == "." {
			// host://ROOT: the root's name.
			rest := strings.TrimPrefix(s.From, schemeHost)
			p.to, _, _ = strings.Cut(rest, "/")
		}
	}
	return p, nil
}

// openHostInput resolves host://ROOT/path: ROOT must be configured, and the
// path, with symlinks resolved, must stay inside it.
func openHostInput(cfg Config, field, from string) (*hostTree, error) {
	if len(cfg.StageRoots) == 0 {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"host:// inputs are unavailable: the operator has not allowed any host directory (serve --stage-root NAME=/abs/dir), so %s cannot be read", from))
	}
	rest := strings.TrimPrefix(from, schemeHost)
	name, sub, _ := strings.Cut(rest, "/")
	dir, ok := cfg.StageRoots[name]
	if !ok {
		names := make([]string, 0, len(cfg.StageRoots))
		for n := range cfg.StageRoots {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, inputErr(field, "%q is not an allowed stage root (allowed: %s); give host://ROOT/path with one of them", name, strings.Join(names, ", "))
	}
	rel := path.Clean("/" + sub)[1:]
	if sub != "" && (strings.HasPrefix(sub, "/") || slices.Contains(strings.Split(sub, "/"), "..")) {
		return nil, inputErr(field, "%q leaves the stage root %q (absolute or through ..); refused", from, name)
	}
	if rel == "" {
		rel = "."
	}
	realRoot, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the stage root %q is not available on the host: %v", name, err))
	}
	real, err := filepath.EvalSymlinks(filepath.Join(realRoot, filepath.FromSlash(rel)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%s does not exist", from))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s cannot be resolved: %s", from, hostErrText(err, realRoot)))
	}
	inside, err := filepath.Rel(realRoot, real)
	if err != nil || !filepath.IsLocal(inside) && inside != "." {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s resolves (through a symlink) outside the stage root %q; refused", from, name))
	}
	root, err := os.OpenRoot(realRoot)
	if err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the stage root %q cannot be opened: %s", name, hostErrText(err, realRoot)))
	}
	t := &hostTree{from: from, root: root, rel: filepath.ToSlash(inside)}
	if err := t.scan(); err != nil {
		return t, hostScanError(from, err, realRoot)
	}
	return t, nil
}

// openArtifactInput resolves artifact://NAME in this workspace's store.
func openArtifactInput(c *Call, field, from string) (*hostTree, error) {
	store, err := artifactStoreFor(c.d.Config, c.ws)
	if err != nil {
		return nil, err
	}
	name, err := cleanArtifactName(field, strings.TrimPrefix(from, schemeArtifact))
	if err != nil {
		return nil, err
	}
	root, err := store.openForRead()
	if err != nil {
		return nil, err
	}
	t := &hostTree{from: from, root: root, rel: name}
	if err := t.scan(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return t, connect.NewError(connect.CodeNotFound, fmt.Errorf("artifact %q does not exist in this workspace's store; collect_outputs reports the names it stores", name))
		}
		return t, hostScanError(from, err, store.dir)
	}
	widenArtifactModes(t)
	return t, nil
}

// hostScanError renders a scan failure without host paths.
func hostScanError(from string, err error, hide string) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, fs.ErrNotExist) {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("%s does not exist", from))
	}
	if errors.Is(err, fs.ErrPermission) {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s cannot be read: permission denied on the host", from))
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s cannot be staged: %s", from, hostErrText(err, hide)))
}

// hostErrText is err's text with the host directory hide left out.
func hostErrText(err error, hide string) string {
	return strings.ReplaceAll(err.Error(), hide, "<root>")
}

// stager performs the plans of one stage_inputs call in the sandbox.
type stager struct {
	c    *Call
	cli  *client.Client
	root string        // the workspace root in the sandbox
	r    *pathResolver // the current input's
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
	var toType client.FileType
	if to.exists {
		toType = to.entry.Type
	}
	if !t.isDir && toType == client.TypeDir {
		// A file staged onto a directory goes inside it.
		toAbs = path.Join(toAbs, path.Base(t.rel))
		toReal, toType = path.Join(toReal, path.Base(t.rel)), client.TypeUnknown
		e, exists, err := s.r.stat(ctx, toReal)
		if err != nil {
			return stagedInput{}, s.c.Check(err)
		}
		if exists {
			toType = e.Type
		}
	}
	if t.isDir && toType != client.TypeUnknown && toType != client.TypeDir {
		return stagedInput{}, inputErr(toField, "%q exists and is not a directory; give another destination for the directory %s", s.r.rel(toAbs), p.spec.From)
	}
	if !t.isDir && toAbs == s.r.root {
		return stagedInput{}, inputErr(toField, "the workspace root cannot be replaced by a file; give a file path")
	}
	fresh := toType == client.TypeUnknown
	items := make([]uploadItem, len(t.files))
	var total int64
	for i, f := range t.files {
		shownAbs, dest := toAbs, toReal
		if f.rel != "" {
			shownAbs = path.Join(toAbs, f.rel)
			dest = path.Join(toReal, f.rel)
			if !fresh {
				// Symlinks may exist in the tree below an existing destination.
				res, err := s.r.resolve(ctx, toField, s.r.rel(shownAbs))
				if err != nil {
					return stagedInput{}, err
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
	if len(items) > 0 {
		batch := &uploadBatch{c: s.c, r: s.r, items: items, fresh: fresh,
			progress: progressReporter(ctx, s.c, len(items), "staged")}
		results, err := batch.run(ctx)
		if err != nil {
			return stagedInput{}, err
		}
		total = 0
		for _, r := range results {
			total += r.bytes
		}
	}
	if t.isDir {
		dirs := t.emptyDirs()
		if len(t.files) == 0 {
			dirs = append([]string{"."}, dirs...)
		}
		for _, d := range dirs {
			if _, err := s.cli.MakeDir(ctx, path.Join(toReal, d)); err != nil {
				return stagedInput{}, s.c.Check(err)
			}
		}
	}
	return stagedInput{From: p.spec.From, To: s.r.rel(toAbs), Mode: "copy", Files: len(items), Bytes: total}, nil
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
	var toType client.FileType
	if to.exists {
		toType = to.entry.Type
	}
	res := stagedInput{From: p.spec.From, Mode: "copy"}
	switch src.Type {
	case client.TypeFile:
		if toType == client.TypeDir {
			toAbs, toReal = path.Join(toAbs, path.Base(srcAbs)), path.Join(toReal, path.Base(srcAbs))
		}
		// Copy beside the destination, then rename: atomic for a file.
		tmp := tempName(toReal, tmpMarker)
		if err := s.ensureDir(ctx, path.Dir(toReal)); err != nil {
			return stagedInput{}, err
		}
		if err := s.command(ctx, p.field, "cp", "-a", "--", srcReal, tmp); err != nil {
			removeQuietly(s.c, s.cli, tmp)
			return stagedInput{}, err
		}
		moved, err := s.cli.Move(ctx, tmp, toReal)
		if err != nil {
			removeQuietly(s.c, s.cli, tmp)
			return stagedInput{}, s.c.Check(err)
		}
		res.Files, res.Bytes = 1, moved.Size
	case client.TypeDir:
		if toType != client.TypeUnknown && toType != client.TypeDir {
			return stagedInput{}, inputErr(toField, "%q exists and is not a directory; give another destination for the directory %s", p.to, p.spec.From)
		}
		entries, err := s.cli.ListDir(ctx, srcReal, workspaceCopyListDepth)
		if err != nil {
			return stagedInput{}, s.c.Check(err)
		}
		for _, e := range entries {
			if e.Type == client.TypeFile {
				res.Files++
				res.Bytes += e.Size
			}
		}
		if err := s.ensureDir(ctx, path.Dir(toReal)); err != nil {
			return stagedInput{}, err
		}
		// -T: the destination is the directory itself, merged into when it exists.
		if err := s.command(ctx, p.field, "cp", "-a", "-T", "--", srcReal, toReal); err != nil {
			return stagedInput{}, err
		}
	default:
		return stagedInput{}, inputErr(fromField, "%s is not a regular file or directory", p.spec.From)
	}
	res.To = s.r.rel(toAbs)
	return res, nil
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
	if exists && e.Type == client.TypeDir {
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
	if e, exists, known := s.r.known(dir); known && exists && e.Type == client.TypeDir {
		return nil
	}
	_, err := s.cli.MakeDir(ctx, dir)
	return s.c.Check(err)
}

// command runs argv in the sandbox (no shell) and turns a failure into an
// error quoting its stderr.
func (s *stager) command(ctx context.Context, field, name string, args ...string) error {
	res, err := s.cli.Run(ctx, client.Command{Cmd: name, Args: args}, client.RunOptions{StdoutLimit: -1, StderrLimit: 4 << 10})
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

// ---------------------------------------------------------- collect_outputs

type collectOutputsInput struct {
	Globs      []string `json:"globs" jsonschema:"required,minItems=1" jsonschema_description:"Workspace-relative patterns of the files to collect (1 to 20): * and ? within a name, [abc] classes, ** for any number of directories (for example out/**/*.csv). Only regular files are collected."`
	Inline     bool     `json:"inline,omitempty" jsonschema_description:"Also return the content of small text files inline, within the server's read cap for the whole call."`
	MaxFiles   int      `json:"max_files,omitempty" jsonschema:"minimum=1" jsonschema_description:"Collect at most this many files (default 100); the first in path order are kept."`
	MaxBytes   int64    `json:"max_bytes,omitempty" jsonschema:"minimum=1" jsonschema_description:"Collect at most this many bytes in total (default 100 MiB)."`
	NamePrefix string   `json:"name_prefix,omitempty" jsonschema_description:"Optional prefix for the artifact names (for example run-2/), so a later collection does not replace these."`
}

// JSONSchemaExtend publishes the limits runCollectOutputs relies on.
func (collectOutputsInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "globs").MaxItems = schemaCount(maxCollectGlobs)
	schemaProp(s, "max_files").Maximum = schemaInt(maxCollectFiles)
	schemaProp(s, "max_bytes").Maximum = schemaInt(maxCollectBytes)
}

type collectOutputsOutput struct {
	Meta
	Artifacts []artifactOut `json:"artifacts" jsonschema_description:"The files collected, in path order."`
	Matched   int           `json:"matched" jsonschema_description:"Regular files that matched the globs (before the caps)."`
	LimitsHit []string      `json:"limits_hit,omitempty" jsonschema_description:"Caps that cut the list: max_files or max_bytes."`
	Unmatched []string      `json:"unmatched,omitempty" jsonschema_description:"Globs that matched no file."`
	Store     string        `json:"store" jsonschema_description:"The host directory holding this workspace's artifacts (for people; the model uses refs)."`
}

type artifactOut struct {
	Name           string `json:"name" jsonschema_description:"The artifact's name: name_prefix plus the file's workspace-relative path."`
	Ref            string `json:"ref" jsonschema_description:"artifact://NAME, to bring it back with stage_inputs (also after the sandbox is recreated)."`
	Path           string `json:"path" jsonschema_description:"The workspace-relative path it was collected from."`
	Bytes          int64  `json:"bytes" jsonschema_description:"Size in bytes."`
	SHA256         string `json:"sha256" jsonschema_description:"SHA-256 of the content, hex."`
	Content        string `json:"content,omitempty" jsonschema_description:"The file's text, when inline was asked and it fits."`
	ContentOmitted string `json:"content_omitted,omitempty" jsonschema_description:"Why the content is not inline although inline was asked."`
}

// CollectOutputs is the collect_outputs tool: files matching globs are
// copied out of the sandbox into the host artifact store (replacing
// artifacts of the same name), optionally inlined.
func CollectOutputs(d *Deps) Tool {
	return define(d, spec[collectOutputsInput, collectOutputsOutput]{
		name:  "collect_outputs",
		title: "Collect outputs",
		description: "Copy files matching globs (** for any number of directories) out of the sandbox into the artifact store on the host, where they survive the sandbox; " +
			"each gets a ref artifact://NAME that stage_inputs brings back, for example after a recreation. An artifact of the same name is replaced. " +
			fmt.Sprintf("With inline, small text files also come back in the result (at most %d bytes in all). ", d.Config.MaxReadBytes) +
			"Caps: max_files (default 100) and max_bytes (default 100 MiB); limits_hit says when they cut the list.",
		toolset:     ToolsetTransfer,
		annotations: Annotations{ReadOnly: false, Destructive: true, Idempotent: true, OpenWorld: false},
		run:         runCollectOutputs,
	})
}

// collectFile is one matched file.
type collectFile struct {
	abs, rel string
	size     int64
	mode     fs.FileMode
}

func runCollectOutputs(ctx context.Context, c *Call, in *collectOutputsInput) (*collectOutputsOutput, error) {
	// The schema checks the number of globs and the ranges of the caps.
	globs := make([]*globPattern, len(in.Globs))
	for i, g := range in.Globs {
		var err error
		if globs[i], err = compileGlob(fmt.Sprintf("globs[%d]", i), g); err != nil {
			return nil, err
		}
	}
	prefix := ""
	if in.NamePrefix != "" {
		var err error
		if prefix, err = cleanArtifactName("name_prefix", in.NamePrefix); err != nil {
			return nil, err
		}
	}
	maxFiles, maxBytes := in.MaxFiles, in.MaxBytes
	if maxFiles == 0 {
		maxFiles = defaultCollectFiles
	}
	if maxBytes == 0 {
		maxBytes = defaultCollectBytes
	}
	store, err := artifactStoreFor(c.d.Config, c.ws)
	if err != nil {
		return nil, err
	}

	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	cli := lease.Client
	r := newPathResolver(c, lease.Sandbox.Workdir, cli)
	out := &collectOutputsOutput{Artifacts: []artifactOut{}, Store: store.dir}
	seen := map[string]bool{}
	var files []collectFile
	for i, g := range globs {
		found, err := matchGlob(ctx, c, r, fmt.Sprintf("globs[%d]", i), g)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			out.Unmatched = append(out.Unmatched, g.raw)
		}
		for _, f := range found {
			if !seen[f.rel] {
				seen[f.rel] = true
				files = append(files, f)
			}
		}
	}
	slices.SortFunc(files, func(a, b collectFile) int { return strings.Compare(a.rel, b.rel) })
	out.Matched = len(files)
	if len(files) == 0 {
		return out, nil
	}

	root, err := store.openForWrite()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	inlineLeft := c.d.Config.MaxReadBytes
	var total int64
	report := progressReporter(ctx, c, min(len(files), maxFiles), "collected")
	for _, f := range files {
		if len(out.Artifacts) >= maxFiles {
			out.LimitsHit = append(out.LimitsHit, "max_files")
			c.Notice("collect_outputs stopped at max_files (%d): %d files matched; raise max_files or narrow the globs, and collect the rest with another call.", maxFiles, len(files))
			break
		}
		if total+f.size > maxBytes {
			out.LimitsHit = append(out.LimitsHit, "max_bytes")
			c.Notice("collect_outputs stopped at max_bytes (%d bytes) before %s (%d bytes): %d of %d matching files were collected; raise max_bytes or narrow the globs.",
				maxBytes, f.rel, f.size, len(out.Artifacts), len(files))
			break
		}
		name := f.rel
		if prefix != "" {
			name = prefix + "/" + f.rel
		}
		a, err := collectOne(ctx, c, cli, root, f, name, maxBytes-total, in.Inline, &inlineLeft)
		if err != nil {
			if len(out.Artifacts) > 0 && !isLost(err) {
				err = connect.NewError(connect.CodeOf(err), fmt.Errorf("%s (the %d artifact(s) before it were stored)", rootCause(err), len(out.Artifacts)))
			}
			return nil, err
		}
		if a == nil { // it grew past max_bytes while being collected
			out.LimitsHit = append(out.LimitsHit, "max_bytes")
			c.Notice("collect_outputs stopped at max_bytes (%d bytes): %s grew past it while being collected.", maxBytes, f.rel)
			break
		}
		total += a.Bytes
		out.Artifacts = append(out.Artifacts, *a)
		report(len(out.Artifacts))
	}
	return out, nil
}

// matchGlob lists the files matching g: a literal pattern is one Stat; a
// pattern with wildcards lists its literal base directory to the depth the
// pattern needs.
func matchGlob(ctx context.Context, c *Call, r *pathResolver, field string, g *globPattern) ([]collectFile, error) {
	if lit, ok := g.literal(); ok {
		res, err := r.resolve(ctx, field, lit)
		if err != nil {
			return nil, err
		}
		// The name itself (a symlink is not a regular file to collect).
		e, exists, err := r.stat(ctx, res.abs)
		if err != nil {
			return nil, c.Check(err)
		}
		if !exists || e.Type != client.TypeFile {
			return nil, nil
		}
		return []collectFile{{abs: res.abs, rel: r.rel(res.abs), size: e.Size, mode: fs.FileMode(e.Mode)}}, nil
	}
	base, depth := g.base()
	if depth < 0 {
		depth = maxCollectDepth
	}
	abs := r.root
	if base != "" {
		res, err := r.resolve(ctx, field, base)
		if err != nil {
			return nil, err
		}
		if !res.exists || res.entry.Type != client.TypeDir {
			return nil, nil // no such directory: nothing matches
		}
		abs = res.abs
	}
	entries, err := r.cli.ListDir(ctx, abs, uint32(depth))
	if client.IsNotFound(err) || connect.CodeOf(err) == connect.CodeInvalidArgument {
		return nil, nil // no such directory (or not a directory): nothing matches
	}
	if err != nil {
		return nil, c.Check(err)
	}
	var out []collectFile
	for _, e := range entries {
		rel := r.rel(e.Path)
		if e.Type != client.TypeFile || (underToolData(rel) && !g.namesToolData()) || !g.match(rel) {
			continue
		}
		out = append(out, collectFile{abs: e.Path, rel: rel, size: e.Size, mode: fs.FileMode(e.Mode)})
	}
	return out, nil
}

// collectOne downloads f into the store as name. It returns nil, nil when
// the file holds more than room bytes (it grew since it was listed); an
// artifact of that name is then left as it was.
func collectOne(ctx context.Context, c *Call, cli *client.Client, root *os.Root, f collectFile, name string, room int64, inline bool, inlineLeft *int64) (*artifactOut, error) {
	dl, err := cli.Download(ctx, f.abs)
	if err != nil {
		return nil, c.Check(err)
	}
	defer dl.Close()
	var peek *boundedBuffer
	if inline && f.size <= *inlineLeft {
		peek = &boundedBuffer{limit: *inlineLeft}
	}
	var w io.Writer
	if peek != nil {
		w = peek
	}
	n, sum, err := writeArtifact(root, name, dl, f.mode, w, room)
	if errors.Is(err, errArtifactTooBig) {
		return nil, nil
	}
	if err != nil {
		// A read error may be the sandbox going away mid-download.
		if cerr := c.Check(err); isLost(cerr) {
			return nil, cerr
		}
		return nil, err
	}
	a := &artifactOut{Name: name, Ref: schemeArtifact + name, Path: f.rel, Bytes: n, SHA256: sum}
	if inline {
		switch {
		case peek == nil || peek.over:
			a.ContentOmitted = fmt.Sprintf("larger than what is left of the inline budget (%d of %d bytes); read it with read_files", *inlineLeft, c.d.Config.MaxReadBytes)
		case !utf8.Valid(peek.buf.Bytes()) || bytes.IndexByte(peek.buf.Bytes(), 0) >= 0:
			a.ContentOmitted = "binary (not UTF-8 text); read it with read_files, which returns base64"
		default:
			a.Content = peek.buf.String()
			*inlineLeft -= n
		}
	}
	return a, nil
}

// boundedBuffer keeps what is written up to limit bytes and notes overflow.
type boundedBuffer struct {
	buf   bytes.Buffer
	limit int64
	over  bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if !b.over {
		if int64(b.buf.Len()+len(p)) > b.limit {
			b.over = true
			b.buf.Reset()
		} else {
			b.buf.Write(p)
		}
	}
	return len(p), nil
}

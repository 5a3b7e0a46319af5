package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/invopop/jsonschema"
)

// Caps of stage_inputs.
const (
	maxStageInputs  = 50
	maxSkippedShown = 50
)

// The schemes stage_inputs reads from.
const (
	schemeHost      = "host://"
	schemeArtifact  = "artifact://"
	schemeWorkspace = "workspace://"
)

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
	roots := make([]string, 0, len(d.Config.StageRoots))
	for name := range d.Config.StageRoots {
		roots = append(roots, name)
	}
	slices.Sort(roots)
	here := "This server allows no host directory"
	if len(roots) > 0 {
		here = "This server's host roots: " + strings.Join(roots, ", ")
	}
	if d.Config.ArtifactsDir == "" {
		here += ", and has no artifact store"
	}
	return define(d, spec[stageInputsInput, stageInputsOutput]{
		name:  "stage_inputs",
		title: "Stage inputs",
		description: "Bring files into the workspace: from host://ROOT/path (only host directories the operator allowed), " +
			"from artifact://NAME (files stored earlier by collect_outputs, which survive a recreated sandbox), or from workspace://path (copy, or mode link for a symbolic link). " +
			"Directories are copied recursively and merged into the destination; existing files of the same name are replaced. " +
			"Files from the host are uploaded under temporary names and moved into place only when all of an input arrived. " +
			here + ".",
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
	// Progress counts the files of host and artifact trees across all
	// inputs, so it only grows from one input to the next.
	files := 0
	for _, p := range plans {
		if p.tree != nil {
			files += len(p.tree.files)
		}
	}
	st := &stager{c: c, cli: lease.Client, root: lease.Sandbox.Workdir, progress: progressReporter(ctx, c, files, "staged")}
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

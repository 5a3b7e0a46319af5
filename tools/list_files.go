package tools

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/invopop/jsonschema"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// Caps and defaults of list_files.
const (
	defaultListDepth   = 2
	maxListDepth       = 10
	defaultListEntries = 1000
	maxListEntries     = 5000
	// maxListBytes caps a listing's entries, as JSON (structuredContent,
	// the larger of its two renderings): past it the list is cut with a
	// next_offset, whatever max_entries says.
	maxListBytes = 64 << 10
)

type listFilesInput struct {
	Path       string `json:"path,omitempty" jsonschema:"default=." jsonschema_description:"Workspace-relative directory to list (default: the workspace root). A file gives just its own entry."`
	Depth      int    `json:"depth,omitempty" jsonschema:"minimum=1" jsonschema_description:"How many levels to descend: 1 lists only the directory's entries. Default 2, or enough for glob (10 when it contains **)."`
	Glob       string `json:"glob,omitempty" jsonschema_description:"Only entries whose workspace-relative path (or path relative to path) matches: * and ? within a name, [abc] classes, ** for any number of directories (for example **/*.go)."`
	MaxEntries int    `json:"max_entries,omitempty" jsonschema:"minimum=1" jsonschema_description:"At most this many entries are returned (default 1000); total says how many matched. The result is also capped at 64 KiB; a cut list gives next_offset."`
	Offset     int    `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Skip this many matching entries first (default 0): pass a cut list's next_offset to continue it."`
}

// JSONSchemaExtend publishes the limits runListFiles relies on.
func (listFilesInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "depth").Maximum = schemaInt(maxListDepth)
	schemaProp(s, "max_entries").Maximum = schemaInt(maxListEntries)
}

type listFilesOutput struct {
	Meta
	Path       string      `json:"path" jsonschema_description:"The directory listed, relative to the workspace."`
	Entries    []fileEntry `json:"entries" jsonschema_description:"Entries in depth-first order, names sorted within a directory."`
	Total      int         `json:"total" jsonschema_description:"Entries that matched, counting those skipped by offset; when truncated, a lower bound (the listing stops at the cap)."`
	Truncated  bool        `json:"truncated" jsonschema_description:"True when max_entries or the result's byte cap cut the list; continue with next_offset, or narrow it with path, depth or glob."`
	NextOffset int         `json:"next_offset,omitempty" jsonschema_description:"When truncated: the offset that lists the entries after these."`
}

type fileEntry struct {
	Path          string `json:"path" jsonschema_description:"Workspace-relative path."`
	Type          string `json:"type" jsonschema:"enum=file,enum=dir,enum=symlink,enum=other" jsonschema_description:"file, dir, symlink (not followed), or other (socket, pipe, device)."`
	Size          int64  `json:"size" jsonschema_description:"Size in bytes."`
	Mode          string `json:"mode" jsonschema_description:"Permission bits in octal (for example 0644)."`
	Modified      string `json:"modified" jsonschema_description:"Last modification time (RFC 3339, UTC)."`
	SymlinkTarget string `json:"symlink_target,omitempty" jsonschema_description:"For symlinks: where the link leads, relative to the workspace when inside it, absolute otherwise."`
}

// ListFiles is the list_files tool: a directory tree to a depth, filtered
// by an optional glob and capped at max_entries. The tools' own run logs
// (.sandbox-mcp) show as one directory entry; their contents are listed
// only when path or glob names that directory.
func ListFiles(d *Deps) Tool {
	return define(d, spec[listFilesInput, listFilesOutput]{
		name:  "list_files",
		title: "List files",
		description: "List a workspace directory to a depth (default 2) with each entry's type, size, mode and modification time, optionally filtered by a glob (** matches any number of directories). " +
			"At most max_entries entries (default 1000, up to 5000) and 64 KiB; total, truncated and next_offset say when more matched and how to continue (offset). " +
			"The tools' own run logs live in .sandbox-mcp; their contents are listed only when path or glob names that directory.",
		toolset:     ToolsetFiles,
		annotations: Annotations{ReadOnly: true, Destructive: false, Idempotent: true, OpenWorld: false},
		run:         runListFiles,
	})
}

func runListFiles(ctx context.Context, c *Call, in *listFilesInput) (*listFilesOutput, error) {
	// The schema checks the ranges of depth and max_entries.
	maxEntries := in.MaxEntries
	if maxEntries == 0 {
		maxEntries = defaultListEntries
	}
	var g *globPattern
	if in.Glob != "" {
		var err error
		if g, err = compileGlob("glob", in.Glob); err != nil {
			return nil, err
		}
	}
	depth := listDepth(in.Depth, g)
	p := in.Path
	if p == "" {
		p = "."
	}
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	cli := lease.Client
	r := newPathResolver(c, lease.Sandbox.Workdir, cli)
	res, err := r.resolve(ctx, "path", p)
	if err != nil {
		return nil, err
	}
	abs, base := res.abs, r.rel(res.abs)
	out := &listFilesOutput{Path: base, Entries: []fileEntry{}}
	if !res.exists {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%q does not exist in the workspace", base))
	}
	st := res.entry
	showToolData := base == toolDataDir || underToolData(base) || (g != nil && g.namesToolData())
	size, full := 0, false
	// add takes one listed entry; it skips the first offset matches and
	// stops the walk at the first match past the caps (entries and the
	// result's JSON bytes), so what is held stays within them.
	add := func(e envdclient.Entry) error {
		rel := r.rel(e.Path)
		if !showToolData && underToolData(rel) {
			return nil
		}
		if g != nil && !g.match(rel) && (base == "." || !g.match(strings.TrimPrefix(rel, base+"/"))) {
			return nil
		}
		out.Total++
		if out.Total <= in.Offset {
			return nil
		}
		if len(out.Entries) >= maxEntries || full {
			out.Truncated = true
			return envdclient.ErrStopWalk
		}
		fe := entryOut(r, rel, e)
		if size += fe.jsonSize(); size > maxListBytes && len(out.Entries) > 0 {
			full, out.Truncated = true, true
			return envdclient.ErrStopWalk
		}
		out.Entries = append(out.Entries, fe)
		return nil
	}
	if st.Type == envdclient.TypeDir {
		if err := cli.WalkDir(ctx, abs, uint32(depth), add); err != nil {
			return nil, c.Check(err)
		}
	} else {
		st.Path = abs
		_ = add(st)
	}
	if out.Truncated {
		shown := in.Offset + len(out.Entries)
		out.NextOffset = shown
		why := fmt.Sprintf("max_entries %d", maxEntries)
		if full {
			why = fmt.Sprintf("the result's cap of %d KiB", maxListBytes>>10)
		}
		c.Notice("list_files shows entries %d-%d (%s); at least %d matched; continue with offset %d, or narrow the listing with path, depth or glob.",
			in.Offset+1, shown, why, out.Total, shown)
	}
	return out, nil
}

// listDepth is how deep list_files lists: depth when given, else as deep
// as the glob g reaches (maxListDepth for **), else defaultListDepth.
func listDepth(depth int, g *globPattern) int {
	switch {
	case depth != 0:
		return depth
	case g == nil:
		return defaultListDepth
	}
	if _, d := g.base(); d < 0 {
		return maxListDepth
	}
	return min(len(g.segs), maxListDepth)
}

// entryOut renders an envd entry for the model.
func entryOut(r *pathResolver, rel string, e envdclient.Entry) fileEntry {
	fe := fileEntry{
		Path: rel, Size: e.Size, Mode: octalMode(fs.FileMode(e.Mode)),
		Modified: e.ModTime.UTC().Format(time.RFC3339),
	}
	switch e.Type {
	case envdclient.TypeFile:
		fe.Type = "file"
	case envdclient.TypeDir:
		fe.Type = "dir"
	case envdclient.TypeSymlink:
		fe.Type = "symlink"
		t := path.Clean(e.SymlinkTarget)
		if path.IsAbs(t) && r.within(t) {
			t = r.rel(t)
		}
		fe.SymlinkTarget = t
	default:
		fe.Type = "other"
	}
	return fe
}

// jsonSize is about the bytes e takes in the listing's JSON.
func (e fileEntry) jsonSize() int {
	return 110 + len(e.Path) + len(e.SymlinkTarget) + len(e.Type)
}

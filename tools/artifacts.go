package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"connectrpc.com/connect"
)

// artifactTmpMarker is part of the temporary names of artifacts being
// written; staging skips such files.
const artifactTmpMarker = ".artifact-tmp-"

// maxHostFiles bounds the files one stage_inputs input may bring in.
const maxHostFiles = 20000

// artifactStore is one workspace's part of the host artifact store,
// Config.ArtifactsDir/<workspace dir>. It is plain files and directories, so
// it needs no state in Deps, and it outlives sandboxes and server restarts:
// after a recreation, stage_inputs brings artifacts back.
type artifactStore struct {
	dir string
}

// artifactStoreFor returns ws's store, or an error when the operator has not
// configured one.
func artifactStoreFor(cfg Config, ws Workspace) (artifactStore, error) {
	if cfg.ArtifactsDir == "" {
		return artifactStore{}, connect.NewError(connect.CodeFailedPrecondition,
			errors.New("the operator has not configured an artifact store (serve --artifacts-dir DIR), so collect_outputs and artifact:// inputs are unavailable; read results with read_files instead"))
	}
	return artifactStore{dir: filepath.Join(cfg.ArtifactsDir, workspaceDirName(ws.Key))}, nil
}

// workspaceDirName encodes a workspace key as a directory name: a hash
// prefix that keeps different keys apart, and a readable slug for people.
func workspaceDirName(key string) string {
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	dash := false
	for _, r := range key {
		ok := r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
		if !ok || r == '-' {
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = true
			continue
		}
		b.WriteRune(r)
		dash = false
		if b.Len() >= 40 {
			break
		}
	}
	slug := strings.Trim(b.String(), ".-")
	if slug == "" {
		slug = "workspace"
	}
	return hex.EncodeToString(sum[:8]) + "-" + slug
}

// openForWrite opens the store, creating it (private: see artifactperm.go).
func (s artifactStore) openForWrite() (*os.Root, error) {
	err := makePrivateDir(filepath.Dir(s.dir))
	if err == nil {
		err = makePrivateDir(s.dir)
	}
	if err != nil {
		return nil, fmt.Errorf("create the artifact store: %w", err)
	}
	return os.OpenRoot(s.dir)
}

// openForRead opens the store; a store never written to is not_found.
func (s artifactStore) openForRead() (*os.Root, error) {
	root, err := os.OpenRoot(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no artifacts have been collected for this workspace yet (collect_outputs stores them)"))
	}
	return root, err
}

// cleanArtifactName checks a name given by the model (artifact://NAME or a
// name_prefix): relative, no "..", no NUL. It returns the cleaned name.
func cleanArtifactName(field, name string) (string, error) {
	switch {
	case name == "":
		return "", inputErr(field, "the artifact name is empty")
	case strings.IndexByte(name, 0) >= 0:
		return "", inputErr(field, "artifact name %q contains a NUL byte", name)
	case strings.HasPrefix(name, "/"):
		return "", inputErr(field, "artifact name %q is absolute; artifact names are relative, like out/report.csv", name)
	}
	clean := path.Clean(name)
	if clean == "." || !filepath.IsLocal(filepath.FromSlash(clean)) {
		return "", inputErr(field, "artifact name %q leaves the artifact store (through ..)", name)
	}
	return clean, nil
}

// errArtifactTooBig is writeArtifact's answer when its reader held more than
// the limit: nothing was stored, and an artifact of that name is left as it
// was.
var errArtifactTooBig = errors.New("the file holds more bytes than allowed")

// writeArtifact stores r as name atomically (a temporary, then a rename) and
// returns its size and SHA-256. mode is the file's mode in the sandbox,
// which the stored file keeps only as far as storedArtifactMode says. peek,
// when set, sees every byte too. When r
// holds more than limit bytes, the temporary is removed before any rename and
// the error is errArtifactTooBig.
func writeArtifact(root *os.Root, name string, r io.Reader, mode fs.FileMode, peek io.Writer, limit int64) (int64, string, error) {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, artifactDirMode); err != nil {
			return 0, "", storeNameError(name, err)
		}
	}
	tmp := tempName(name, artifactTmpMarker)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, "", storeNameError(name, err)
	}
	h := sha256.New()
	w := io.MultiWriter(f, h)
	if peek != nil {
		w = io.MultiWriter(f, h, peek)
	}
	n, err := io.Copy(w, io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = errArtifactTooBig
	}
	if err == nil {
		err = root.Chmod(tmp, storedArtifactMode(mode))
	}
	if err == nil {
		err = root.Rename(tmp, name)
		if err != nil {
			err = storeNameError(name, err)
		}
	}
	if err != nil {
		_ = root.Remove(tmp)
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// storeNameError explains a store write that failed on the shape of the
// tree (a file where a directory is needed, or the reverse).
func storeNameError(name string, err error) error {
	if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrInvalid) || isNotDirErr(err) || isDirErr(err) {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"artifact %q cannot be stored because an existing artifact's name conflicts with it (a file where a directory is needed, or the reverse); choose another name_prefix", name))
	}
	return fmt.Errorf("store artifact %q: %w", name, err)
}

func isNotDirErr(err error) bool { return errors.Is(err, syscall.ENOTDIR) }
func isDirErr(err error) bool {
	return errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY)
}

// hostFile is a regular file of a host tree (a stage root or the artifact
// store) to bring into the workspace.
type hostFile struct {
	rel  string // slash path below the source ("" when the source is this file)
	size int64
	mode fs.FileMode
}

// skippedFile is an entry of a host tree that was not staged, and why.
type skippedFile struct {
	From   string `json:"from" jsonschema_description:"The input it belongs to."`
	Path   string `json:"path" jsonschema_description:"Its path below the input."`
	Reason string `json:"reason" jsonschema_description:"Why it was not staged."`
}

// hostTree is a source of stage_inputs on the host: a file or directory
// under an *os.Root, which keeps every open inside the root even if a
// symlink changes after the checks.
type hostTree struct {
	from  string   // the input as given, for messages
	root  *os.Root // the stage root or the artifact store
	rel   string   // slash path of the source below root ("." for root)
	isDir bool
	files []hostFile
	dirs  []string // directories below the source (slash, relative)
	skip  []skippedFile
}

// scan lists the tree: regular files (and symlinks to regular files that
// stay inside the root) are staged; symlinks to directories are not
// followed; symlinks leading outside, dangling ones and special files
// (sockets, pipes, devices) are skipped and reported.
func (t *hostTree) scan() error {
	fi, err := t.root.Stat(t.rel)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode().IsRegular():
		t.files = []hostFile{{size: fi.Size(), mode: fi.Mode().Perm()}}
		return nil
	case !fi.IsDir():
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a regular file or directory (%s)", t.from, fi.Mode().Type()))
	}
	t.isDir = true
	return fs.WalkDir(t.root.FS(), t.rel, func(p string, d fs.DirEntry, err error) error {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, t.rel), "/")
		if t.rel == "." {
			rel = p
		}
		if err != nil {
			if p == t.rel {
				return err
			}
			t.skip = append(t.skip, skippedFile{From: t.from, Path: rel, Reason: "could not be read: " + err.Error()})
			return nil
		}
		if p == t.rel {
			return nil
		}
		if strings.Contains(d.Name(), artifactTmpMarker) {
			return nil // an artifact being written
		}
		switch typ := d.Type(); {
		case typ.IsDir():
			t.dirs = append(t.dirs, rel)
		case typ.IsRegular():
			info, err := d.Info()
			if err != nil {
				return nil // removed while scanning
			}
			t.files = append(t.files, hostFile{rel: rel, size: info.Size(), mode: info.Mode().Perm()})
		case typ&fs.ModeSymlink != 0:
			target, err := t.root.Stat(p)
			switch {
			case err != nil:
				t.skip = append(t.skip, skippedFile{From: t.from, Path: rel, Reason: "symlink that is dangling or leads outside the allowed directory"})
			case target.Mode().IsRegular():
				t.files = append(t.files, hostFile{rel: rel, size: target.Size(), mode: target.Mode().Perm()})
			case target.IsDir():
				t.skip = append(t.skip, skippedFile{From: t.from, Path: rel, Reason: "symlink to a directory (not followed)"})
			default:
				t.skip = append(t.skip, skippedFile{From: t.from, Path: rel, Reason: "symlink to a special file"})
			}
		default:
			t.skip = append(t.skip, skippedFile{From: t.from, Path: rel, Reason: fmt.Sprintf("special file (%s), not staged", typ.Type())})
		}
		if len(t.files) > maxHostFiles {
			return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%s holds more than %d files; stage a smaller directory", t.from, maxHostFiles))
		}
		return nil
	})
}

// open opens file f of the tree.
func (t *hostTree) open(f hostFile) (io.ReadCloser, error) {
	p := t.rel
	if f.rel != "" {
		p = path.Join(t.rel, f.rel)
	}
	return t.root.Open(p)
}

// emptyDirs returns the tree's directories that hold no file to stage
// (they are created explicitly; uploads create only parents of files).
func (t *hostTree) emptyDirs() []string {
	full := map[string]bool{}
	for _, f := range t.files {
		for d := path.Dir(f.rel); d != "." && d != "/" && !full[d]; d = path.Dir(d) {
			full[d] = true
		}
	}
	var out []string
	for _, d := range t.dirs {
		if !full[d] {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

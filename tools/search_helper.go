package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/search"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// leanEnvdPath is where the local (under bwrap) and docker providers put
// their envd inside a sandbox: the lean envd, or a sandbox-mcp binary. Its
// `envd search` mode, which both binaries have, is the search helper.
const leanEnvdPath = "/.sandbox-mcp/envd"

// helperDir is the workspace directory the search helper is uploaded to in
// a sandbox that has none (an E2B sandbox, a local sandbox without
// isolation), named by its content so an upgrade brings a new one.
const helperDir = toolDataDir + "/bin"

// maxSearchRecord bounds one JSON line of the helper's output.
const maxSearchRecord = 1 << 20

// helperCache remembers, per sandbox, the path of a search helper that
// answered.
type helperCache struct {
	mu    sync.Mutex
	paths map[string]string // workspace key + sandbox id → path
}

func (h *helperCache) get(key string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.paths[key]
}

func (h *helperCache) set(key, p string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paths == nil {
		h.paths = map[string]string{}
	}
	h.paths[key] = p
}

// searchRun is what the helper reported.
type searchRun struct {
	matches []searchMatch
	summary *search.Summary
	started bool
}

// errNoHelper says the program run was not a search helper of our protocol.
var errNoHelper = errors.New("no search helper")

// runSearchHelper runs the search helper with args in the lease's sandbox:
// the one it ran last time, else the lean envd of the local and docker
// providers, else the embedded lean envd uploaded into the workspace once.
func runSearchHelper(ctx context.Context, c *Call, lease *manage.Lease, args []string) (*searchRun, error) {
	key := c.ws.Key + "\x00" + lease.Sandbox.ID
	candidate := c.d.helpers.get(key)
	tried := ""
	if candidate == "" {
		candidate = leanEnvdPath
	}
	for {
		rs, err := execSearch(ctx, c, lease.Client, candidate, args)
		if err == nil {
			c.d.helpers.set(key, candidate)
			return rs, nil
		}
		if errors.Is(err, errNoHelper) && tried != "" {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("search_files could not run its search helper in this sandbox (%s); search with grep through workspace_exec instead",
				relText(lease.Sandbox.Workdir, err.Error())))
		}
		if !errors.Is(err, errNoHelper) {
			return nil, err
		}
		tried = candidate
		installed, ierr := installHelper(ctx, c, lease)
		if ierr != nil {
			return nil, ierr
		}
		if installed == candidate {
			return nil, err
		}
		candidate = installed
	}
}

// execSearch runs one helper and decodes its output. A program that does
// not answer with our protocol's start record is errNoHelper.
func execSearch(ctx context.Context, c *Call, cli *envdclient.Client, bin string, args []string) (*searchRun, error) {
	rs := &searchRun{}
	dec := &recordWriter{onRecord: func(line []byte) error { return rs.record(c, line) }}
	res, err := cli.Run(ctx, envdclient.Command{Cmd: bin, Args: args, Timeout: searchTimeout + 10*time.Second},
		envdclient.RunOptions{Stdout: dec, StdoutLimit: -1, StderrLimit: 4 << 10})
	if err != nil {
		err = c.Check(err)
		if isLost(err) || ctx.Err() != nil {
			return nil, err
		}
		if !rs.started {
			// The program could not be started (it does not exist).
			return nil, fmt.Errorf("%w: %v", errNoHelper, err)
		}
		return nil, err
	}
	if !rs.started {
		return nil, fmt.Errorf("%w: %s exited with status %d", errNoHelper, bin, res.ExitCode)
	}
	if res.TeeErr != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("reading the search's output: %w", res.TeeErr))
	}
	if res.ExitCode != 0 || rs.summary == nil {
		msg := strings.TrimSpace(string(res.Stderr.Bytes()))
		msg = strings.TrimPrefix(msg, "search: ")
		if res.TimedOut {
			msg = "the search did not finish in time"
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the search failed (status %d): %s", res.ExitCode, relText(c.lease.Sandbox.Workdir, msg)))
	}
	return rs, nil
}

func (rs *searchRun) record(c *Call, line []byte) error {
	var r search.Record
	if err := json.Unmarshal(line, &r); err != nil {
		if !rs.started {
			return nil // not our helper; execSearch says so
		}
		return fmt.Errorf("a search record is not JSON: %w", err)
	}
	switch {
	case r.Type == "start":
		if r.Version != search.ProtocolVersion {
			return nil
		}
		rs.started = true
	case !rs.started:
	case r.Type == "match":
		rs.matches = append(rs.matches, searchMatch{Path: r.Path, Line: r.Line, Text: r.Text, Cut: r.Cut, Before: r.Before, After: r.After})
	case r.Type == "error":
		c.d.Logger.Debug("search_files: unreadable", "path", r.Path, "err", r.Error)
	case r.Type == "done":
		rs.summary = r.Summary
	}
	return nil
}

// recordWriter splits what is written into lines and hands each over.
type recordWriter struct {
	buf      []byte
	onRecord func([]byte) error
}

func (w *recordWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(w.buf)+len(p) > maxSearchRecord {
				return 0, errors.New("a search record is too long")
			}
			w.buf = append(w.buf, p...)
			break
		}
		line := p[:i]
		if len(w.buf) > 0 {
			line = append(w.buf, line...)
		}
		if err := w.onRecord(line); err != nil {
			return 0, err
		}
		w.buf = w.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}

// goarchOf maps `uname -m` to GOARCH.
var goarchOf = map[string]string{"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}

// installHelper puts the embedded lean envd for the sandbox's architecture
// at helperDir in its workspace (once: a file of the right size is kept)
// and returns its path.
func installHelper(ctx context.Context, c *Call, lease *manage.Lease) (string, error) {
	cli := lease.Client
	res, err := cli.Run(ctx, envdclient.Command{Cmd: "uname", Args: []string{"-m"}, Timeout: 30 * time.Second}, envdclient.RunOptions{StdoutLimit: 256, StderrLimit: 1 << 10})
	if err != nil {
		return "", c.Check(err)
	}
	machine := strings.TrimSpace(string(res.Stdout.Bytes()))
	goarch, ok := goarchOf[machine]
	var bin *envdbin.Envd
	if ok {
		bin = envdbin.Lookup(goarch)
	}
	if bin == nil {
		return "", connect.NewError(connect.CodeUnimplemented, fmt.Errorf("search_files needs its search helper in the sandbox, and this server carries none for %q (build the server with make build); search with grep through workspace_exec instead", machine))
	}
	dest := path.Join(path.Clean(lease.Sandbox.Workdir), helperDir, "sandbox-envd-"+bin.SHA256[:16])
	if e, err := cli.Stat(ctx, dest); err == nil && e.Type == envdclient.TypeFile && e.Size == int64(len(bin.Data)) && e.Mode&0o100 != 0 {
		return dest, nil
	}
	tmp := tempName(dest, tmpMarker)
	if err := cli.Upload(ctx, tmp, bytes.NewReader(bin.Data), envdclient.UploadOptions{}); err != nil {
		return "", c.Check(err)
	}
	chmod, err := cli.Run(ctx, envdclient.Command{Cmd: "chmod", Args: []string{"0755", "--", tmp}, Timeout: 30 * time.Second}, envdclient.RunOptions{StdoutLimit: -1, StderrLimit: 1 << 10})
	if err == nil && chmod.ExitCode != 0 {
		err = connect.NewError(connect.CodeInternal, fmt.Errorf("installing the search helper: chmod exited with status %d: %s", chmod.ExitCode, chmod.Stderr.Bytes()))
	}
	if err == nil {
		_, err = cli.Move(ctx, tmp, dest)
	}
	if err != nil {
		removeQuietly(c, cli, tmp)
		return "", c.Check(err)
	}
	return dest, nil
}

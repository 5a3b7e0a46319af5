package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"path"
	"strings"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// The shell's working directory persists between workspace_exec calls, as
// in a terminal: where a command string's shell ends (after any cd) is where
// the next command of the workspace starts. Nothing else persists: every
// command is a new shell, so variables, exports, aliases and functions are
// gone in the next call. The cwd argument starts one command elsewhere, like
// a cd before it, and persists like one. A new sandbox (a reset, a
// recreation) and a server restart start again at the workspace root, and so
// does a directory outside the workspace or one that no longer exists.
//
// The shell reports its last directory through a file: a trap on EXIT,
// set before the command line, writes pwd to cwdDir/<run_id> when it is not
// where the shell started, and the server reads and removes it after the
// run (no file: the shell stayed where it started). A command that fails
// or calls exit still writes it; one killed by a signal (its timeout), one that
// replaced the shell (exec) or set its own EXIT trap does not, and the
// directory stays where the command started. What the file says is only
// used after the same checks as a cwd argument: a directory inside the
// workspace.

// cwdDir is where shells leave their last directory, relative to the
// workspace root.
const cwdDir = toolDataDir + "/cwd"

// cwdFileMax bounds what is read of a cwd file.
const cwdFileMax = 8 << 10

// cwdVar is the shell variable (not exported) that names the cwd file;
// startVar names the directory the shell started in.
const (
	cwdVar   = "__sandbox_mcp_cwd"
	startVar = "__sandbox_mcp_cwd0"
)

// cwdTrap returns line prefixed with the trap that writes the shell's last
// directory to file, on the same line (error messages keep their line
// numbers). A shell that ends where it started (start, still the same
// directory) writes nothing, which spares the server removing the file.
func cwdTrap(file, start, line string) string {
	return cwdVar + "=" + shellQuoteArgs([]string{file}) + " " + startVar + "=" + shellQuoteArgs([]string{start}) +
		`; trap '{ [ "$PWD" = "$` + startVar + `" ] && [ . -ef "$` + startVar + `" ]; } 2>/dev/null || { mkdir -p -- "${` + cwdVar + `%/*}" 2>/dev/null; pwd >"$` + cwdVar + `" 2>/dev/null; }' EXIT; ` + line
}

// shellDirs remembers, per workspace key, where its last shell command
// ended, with the sandbox generation it belongs to. It is safe for
// concurrent use; the zero value is ready.
type shellDirs struct {
	mu sync.Mutex
	m  map[string]shellDir
}

type shellDir struct {
	gen int64
	abs string
}

// get returns key's directory in generation gen, or "".
func (s *shellDirs) get(key string, gen int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.m[key]; ok && d.gen == gen {
		return d.abs
	}
	return ""
}

// set records abs as key's directory in generation gen.
func (s *shellDirs) set(key string, gen int64, abs string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxShellCache {
		s.m = map[string]shellDir{}
	}
	s.m[key] = shellDir{gen: gen, abs: abs}
}

// drop forgets key (its session ended).
func (s *shellDirs) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// startDir returns where a command of c starts when no cwd is given: the
// directory the workspace's last shell ended in, when it is still a
// directory inside the workspace, else the root (with a notice).
func startDir(ctx context.Context, c *Call, r *pathResolver, gen int64) (string, error) {
	prev := c.d.dirs.get(c.ws.Key, gen)
	if prev == "" || prev == r.root {
		return r.root, nil
	}
	res, err := r.resolve(ctx, "cwd", r.rel(prev))
	switch {
	case err != nil && (isLost(err) || ctx.Err() != nil):
		return "", err
	case err == nil && res.exists && res.entry.Type == envdclient.TypeDir:
		return res.abs, nil
	}
	c.Notice("The working directory of the previous command, %s, is no longer a directory in the workspace; this command starts at the workspace root.", r.rel(prev))
	c.d.dirs.set(c.ws.Key, gen, r.root)
	return r.root, nil
}

// readShellDir reads and removes the cwd file a shell left and returns the
// directory, or "" when there is none (the shell did not get to write it).
func readShellDir(ctx context.Context, cli *envdclient.Client, file string) string {
	dl, err := cli.Download(ctx, file)
	if err != nil {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(dl, cwdFileMax))
	_ = dl.Close()
	_ = cli.Remove(ctx, file)
	if err != nil {
		return ""
	}
	dir := strings.TrimSuffix(string(b), "\n")
	if !path.IsAbs(dir) || strings.ContainsAny(dir, "\n\x00") {
		return ""
	}
	return path.Clean(dir)
}

// recordShellDir sets out.Cwd and what the next command starts in from
// where the shell ended (ended, "" when unknown: then where it started).
func recordShellDir(c *Call, r *pathResolver, gen int64, started, ended string, out *execOutput) {
	dir := started
	if ended != "" {
		dir = ended
	}
	if !r.within(dir) {
		c.Notice("The command ended in %s, outside the workspace; the next command starts at the workspace root.", dir)
		out.Cwd = dir
		c.d.dirs.set(c.ws.Key, gen, r.root)
		return
	}
	out.Cwd = r.rel(dir)
	c.d.dirs.set(c.ws.Key, gen, dir)
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

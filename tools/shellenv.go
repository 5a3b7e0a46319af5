package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// A command string runs with bash -c and the sandbox's login environment,
// captured once per sandbox, instead of bash -lc: a login shell re-reads the
// profile (and forks what it runs) on every call, and the host's
// /etc/profile replaces the PATH the sandbox was given.

// captureTimeout bounds the run that captures a sandbox's login environment;
// past it the sandbox's commands run with bash -lc instead.
const captureTimeout = 10 * time.Second

// captureLimit is the most output the capture keeps: two environments.
// captureStderrLimit is what it keeps of stderr, for the log when it fails.
const (
	captureLimit       = 1 << 20
	captureStderrLimit = 2 << 10
)

// The capture prints the non-login environment and baseMarker, then, from
// the login shell after its profile ran, a NUL (so that whatever the profile
// printed stays apart), loginMarker and the login environment; env -0 ends
// each variable with a NUL, as the markers are ended. Neither marker holds
// '=', so neither can be a variable. A sandbox whose env lacks -0 fails the
// capture and keeps bash -lc.
const (
	baseMarker  = "sandbox-mcp:base-env-end"
	loginMarker = "sandbox-mcp:login-env"
)

// captureScript runs as `bash -c captureScript bash`: "$0" is the shell, so
// the login shell is the same bash.
const captureScript = `env -0; printf '` + baseMarker + `\0'; exec "$0" -lc 'printf "\0` + loginMarker + `\0"; exec env -0'`

// shellInternal are the variables a shell sets for itself, which say
// nothing about the login profile.
var shellInternal = map[string]bool{"SHLVL": true, "_": true, "PWD": true, "OLDPWD": true}

// shellProfile is how one sandbox runs command strings.
type shellProfile struct {
	// shell is the shell's path or name: "/bin/bash", "bash" (found by PATH)
	// or "/bin/sh".
	shell string
	// env is what the login profile adds to the sandbox's environment (PATH
	// merged, see mergePath); nil when it adds nothing. Every call of the
	// sandbox shares it, so nothing changes it.
	env map[string]string
	// loginOnly is set when the capture failed: every command runs in a
	// login shell, as it did before the capture existed.
	loginOnly bool
}

// isBash reports whether the profile's shell is bash.
func (p shellProfile) isBash() bool { return path.Base(p.shell) == "bash" }

// command returns the program, arguments and environment that run line,
// with user's variables over the login environment. login asks for a login
// shell (bash -lc, sh -lc), which reads the profile itself.
func (p shellProfile) command(line string, login bool, user map[string]string) (string, []string, map[string]string) {
	switch {
	case login || p.loginOnly:
		return p.shell, []string{"-lc", line}, user
	case len(p.env) == 0:
		return p.shell, []string{"-c", line}, user
	case len(user) == 0:
		return p.shell, []string{"-c", line}, p.env
	}
	env := make(map[string]string, len(p.env)+len(user))
	maps.Copy(env, p.env)
	maps.Copy(env, user)
	return p.shell, []string{"-c", line}, env
}

// loadShellProfile detects the sandbox's shell and, for bash, captures its
// login environment. A capture that fails on the sandbox's side (timeout,
// a profile that exits, unreadable output) gives a loginOnly profile and is
// logged; an error is a failed call (cancelled, or a sandbox in trouble),
// which nothing should remember.
func loadShellProfile(ctx context.Context, cli *envdclient.Client, sandboxID string, log *slog.Logger) (shellProfile, error) {
	sh, err := detectShell(ctx, cli)
	if err != nil {
		return shellProfile{}, err
	}
	p := shellProfile{shell: sh}
	if !p.isBash() {
		return p, nil
	}
	env, err := captureLoginEnv(ctx, cli, sh)
	var failed *captureError
	switch {
	case errors.As(err, &failed):
		log.Warn("could not capture the sandbox's login environment; its commands run with bash -lc",
			"sandbox", sandboxID, "err", err)
		p.loginOnly = true
		return p, nil
	case err != nil:
		return shellProfile{}, err
	}
	p.env = env
	return p, nil
}

// captureError is a capture that ran but did not give an environment.
type captureError struct{ reason string }

func (e *captureError) Error() string { return "login environment capture: " + e.reason }

// captureLoginEnv runs captureScript with sh and returns loginEnvDelta of
// what it printed.
func captureLoginEnv(ctx context.Context, cli *envdclient.Client, sh string) (map[string]string, error) {
	res, err := cli.Run(ctx, envdclient.Command{Cmd: sh, Args: []string{"-c", captureScript, sh}, Timeout: captureTimeout},
		envdclient.RunOptions{StdoutLimit: captureLimit, StderrLimit: captureStderrLimit})
	switch {
	case err != nil && (ctx.Err() != nil || envdclient.IsPossibleLoss(err)):
		return nil, err
	case err != nil:
		return nil, &captureError{reason: err.Error()}
	case res.TimedOut:
		return nil, &captureError{reason: fmt.Sprintf("timed out after %s", captureTimeout)}
	case res.ExitCode != 0:
		return nil, &captureError{reason: fmt.Sprintf("exit status %d: %q", res.ExitCode, bytes.TrimSpace(res.Stderr.Bytes()))}
	case res.Stdout.Truncated:
		return nil, &captureError{reason: fmt.Sprintf("more than %d bytes of output", captureLimit)}
	}
	base, login, ok := splitCapture(res.Stdout.Head)
	if !ok {
		return nil, &captureError{reason: "its output lacks the markers"}
	}
	return loginEnvDelta(base, login), nil
}

// splitCapture parses captureScript's output into the two environments.
func splitCapture(out []byte) (base, login map[string]string, ok bool) {
	first, rest, ok := bytes.Cut(out, []byte(baseMarker+"\x00"))
	if !ok {
		return nil, nil, false
	}
	_, second, ok := bytes.Cut(rest, []byte("\x00"+loginMarker+"\x00"))
	if !ok {
		return nil, nil, false
	}
	return parseEnv0(first), parseEnv0(second), true
}

// parseEnv0 parses env -0 output; an entry without '=' is skipped.
func parseEnv0(b []byte) map[string]string {
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	return env
}

// loginEnvDelta returns the variables a command needs so that it sees the
// login environment on top of the sandbox's own (base): those the login
// profile set or changed, except the shell's own (shellInternal), and PATH
// as mergePath makes it when that differs from the sandbox's. Nil when there
// are none.
func loginEnvDelta(base, login map[string]string) map[string]string {
	var env map[string]string
	set := func(k, v string) {
		if env == nil {
			env = map[string]string{}
		}
		env[k] = v
	}
	for k, v := range login {
		if k == "PATH" || shellInternal[k] {
			continue
		}
		if old, ok := base[k]; !ok || old != v {
			set(k, v)
		}
	}
	if p := mergePath(base["PATH"], login["PATH"]); p != base["PATH"] {
		set("PATH", p)
	}
	return env
}

// mergePath returns the sandbox's PATH (base) with the directories the
// login PATH has and base lacks, so that nothing the operator or the sandbox
// put in PATH is lost (a profile that sets PATH outright, as the host's
// /etc/profile does, would drop the sbin directories). Each added directory
// keeps its place relative to the directories both share: those before the
// first shared one go in front (PATH="$HOME/.local/bin:$PATH"), those after
// the last go at the end (PATH="$PATH:/usr/local/go/bin"), and one between
// goes right before the shared directory that follows it in the login PATH.
// Order within each group is the login PATH's.
func mergePath(base, login string) string {
	if login == base || login == "" {
		return base
	}
	baseDirs := strings.Split(base, ":")
	inBase := make(map[string]bool, len(baseDirs))
	for _, d := range baseDirs {
		inBase[d] = true
	}
	before := map[string][]string{} // shared directory → added ones that precede it
	added := map[string]bool{}
	var pending []string
	for _, d := range strings.Split(login, ":") {
		switch {
		case d == "" || added[d]:
		case inBase[d]:
			if len(pending) > 0 {
				before[d] = append(before[d], pending...)
				pending = nil
			}
		default:
			added[d] = true
			pending = append(pending, d)
		}
	}
	if len(added) == 0 {
		return base
	}
	var front []string
	if base == "" {
		baseDirs = nil
	} else if len(before) > 0 {
		// What precedes the login PATH's first shared directory goes in front
		// of all of base, not just before that directory.
		for _, d := range strings.Split(login, ":") {
			if inBase[d] {
				front, before[d] = before[d], nil
				break
			}
		}
	}
	out := make([]string, 0, len(baseDirs)+len(added))
	out = append(out, front...)
	for _, d := range baseDirs {
		out = append(out, before[d]...)
		delete(before, d)
		out = append(out, d)
	}
	out = append(out, pending...)
	return strings.Join(out, ":")
}

// maxShellCache bounds shellCache; past it the cache starts over (a capture
// per sandbox is cheap, an unbounded map in a long-lived server is not).
const maxShellCache = 4096

// shellCache remembers, per sandbox id, its shellProfile. A sandbox id is
// new with each generation and after a reset, so a new sandbox gets a new
// capture. Concurrent first calls on one sandbox share one capture. It is
// safe for concurrent use; the zero value is ready.
type shellCache struct {
	mu      sync.Mutex
	flights map[string]*profileFlight
}

// profileFlight is one sandbox's profile, loaded once: done closes when
// profile and err are set.
type profileFlight struct {
	done    chan struct{}
	profile shellProfile
	err     error
}

// profileFor returns the shell profile of the lease's sandbox, loading it on
// first use (loadShellProfile). A load that fails is forgotten, so the next
// call tries again; callers that waited on a load cancelled by its own call
// try again themselves.
func (s *shellCache) profileFor(ctx context.Context, c *Call, l *manage.Lease) (shellProfile, error) {
	id := l.Sandbox.ID
	for {
		s.mu.Lock()
		f, ok := s.flights[id]
		if !ok {
			f = &profileFlight{done: make(chan struct{})}
			if s.flights == nil || len(s.flights) >= maxShellCache {
				s.flights = map[string]*profileFlight{}
			}
			s.flights[id] = f
		}
		s.mu.Unlock()
		if !ok {
			f.profile, f.err = loadShellProfile(ctx, l.Client, id, c.d.Logger)
			if f.err != nil {
				s.mu.Lock()
				if s.flights[id] == f {
					delete(s.flights, id)
				}
				s.mu.Unlock()
			}
			close(f.done)
			return f.profile, c.Check(f.err)
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return shellProfile{}, ctx.Err()
		}
		if f.err == nil {
			return f.profile, nil
		}
		if !errors.Is(f.err, context.Canceled) && !errors.Is(f.err, context.DeadlineExceeded) {
			return shellProfile{}, c.Check(f.err)
		}
	}
}

// detectShell finds the shell of command strings: a Stat of /bin/bash, and,
// when that is refused (a daemon confined to the workspace cannot stat
// system files), a probe that runs bash.
func detectShell(ctx context.Context, cli *envdclient.Client) (string, error) {
	e, err := cli.Stat(ctx, "/bin/bash")
	switch {
	case err == nil && e.Type != envdclient.TypeDir:
		return "/bin/bash", nil
	case envdclient.IsNotFound(err):
		return "/bin/sh", nil
	case err != nil && envdclient.IsPossibleLoss(err):
		return "", err
	}
	res, err := cli.Run(ctx, envdclient.Command{Cmd: "bash", Args: []string{"-c", ":"}, Timeout: 30 * time.Second},
		envdclient.RunOptions{StdoutLimit: -1, StderrLimit: -1})
	switch {
	case envdclient.IsNotFound(err):
		return "/bin/sh", nil
	case err != nil:
		return "", err
	case res.ExitCode != 0:
		return "/bin/sh", nil
	}
	return "bash", nil
}

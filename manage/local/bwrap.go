//go:build linux

package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Fixed paths inside a bwrap sandbox.
const (
	insideWorkspace = "/workspace"
	insideEnvd      = "/.sandbox-mcp/envd"
	// insideRun is the sandbox's run directory, bound writable. It holds
	// nothing the server reads: envd's socket is elsewhere (socket.go).
	insideRun = "/.sandbox-mcp/run"
	// insideUID and insideGID are the ids sandbox processes have inside.
	insideUID = 1000
	insideGID = 1000
)

// bwrapSeccompFD is the descriptor bwrap reads the seccomp filter from.
const bwrapSeccompFD = 7

// sandboxPath is the PATH of every sandbox process.
const sandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// namespaceArgs are the bwrap options that build a sandbox's namespaces; the
// probe uses the same ones, so a probe that passes means sandboxes start.
func namespaceArgs(hostname string, network bool) []string {
	args := []string{
		"--unshare-user", "--uid", strconv.Itoa(insideUID), "--gid", strconv.Itoa(insideGID),
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", hostname,
		"--unshare-cgroup-try",
	}
	if !network {
		args = append(args, "--unshare-net")
	}
	return append(args, "--die-with-parent", "--new-session", "--clearenv")
}

// procDevArgs give a sandbox its own /proc and a minimal /dev, with a
// /dev/shm that uid 1000 can use (POSIX shared memory, Python's
// multiprocessing locks).
var procDevArgs = []string{"--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm"}

// systemMountArgs binds the host's system directories read-only. On a
// merged-/usr host /bin, /lib… are symlinks into /usr and are recreated as
// symlinks, so paths like /bin/sh keep working.
func systemMountArgs() []string {
	var args []string
	for _, dir := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"} {
		info, err := os.Lstat(dir)
		switch {
		case err != nil:
			continue
		case info.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(dir)
			if err != nil {
				continue
			}
			args = append(args, "--symlink", target, dir)
		case info.IsDir():
			args = append(args, "--ro-bind", dir, dir)
		}
	}
	return args
}

// resolvConfArgs makes DNS work in a sandbox with network: when
// /etc/resolv.conf is a symlink out of /etc (systemd-resolved's
// /run/systemd/resolve/stub-resolv.conf), the directory it points into is
// bound read-only at the same place.
func resolvConfArgs() []string {
	link, err := os.Readlink("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	if !filepath.IsAbs(link) {
		link = filepath.Join("/etc", link)
	}
	target, err := filepath.EvalSymlinks(link)
	if err != nil {
		return nil
	}
	dir := filepath.Dir(target)
	for _, sys := range []string{"/etc", "/usr", "/opt"} {
		if dir == sys || strings.HasPrefix(dir, sys+"/") {
			return nil
		}
	}
	return []string{"--ro-bind", dir, dir}
}

// sandboxEnv is the environment every sandbox process starts from.
func sandboxEnv(home, tmp string) [][2]string {
	return [][2]string{{"PATH", sandboxPath}, {"HOME", home}, {"LANG", "C.UTF-8"}, {"TMPDIR", tmp}}
}

// envdArgs are the arguments of `sandbox-mcp envd`, which the lean
// sandbox-envd takes too (its leading "envd" included), listening on listen
// ("fd:N": the socket the server made, see socket.go). envd builds each
// process's environment itself (PATH from its own, HOME, USER, LOGNAME, then
// its --env), so LANG and TMPDIR travel as --env, overridable by the
// sandbox's own env.
func envdArgs(listen, root, tmp string, confine bool, extra map[string]string) []string {
	args := []string{"envd", "--listen", listen, "--root", root, "--ready-fd", "3"}
	if confine {
		args = append(args, "--confine")
	}
	env := map[string]string{"LANG": "C.UTF-8", "TMPDIR": tmp}
	for k, v := range extra {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--env", k+"="+env[k])
	}
	return args
}

// bwrapArgs is the whole bwrap command line of a sandbox in dir, running the
// envd binary at envd. fd 3 is the ready pipe (passed on to envd), 4 bwrap's
// info pipe, 5 its block pipe, 6 envd's listening socket (passed on) and,
// with seccomp, 7 the seccomp filter (read and closed by bwrap).
func (p *Provider) bwrapArgs(id, dir, envd string, cfg sandboxSpec, seccomp bool) []string {
	args := namespaceArgs(id, cfg.network)
	for _, kv := range sandboxEnv(insideWorkspace, "/tmp") {
		args = append(args, "--setenv", kv[0], kv[1])
	}
	args = append(args, p.sysMounts...)
	args = append(args, procDevArgs...)
	args = append(args,
		"--bind", subdirPath(dir, "workspace"), insideWorkspace,
		"--bind", subdirPath(dir, "tmp"), "/tmp",
		"--bind", subdirPath(dir, "run"), insideRun,
		"--ro-bind", envd, insideEnvd,
	)
	if cfg.network {
		args = append(args, resolvConfArgs()...)
	}
	if seccomp {
		args = append(args, "--seccomp", strconv.Itoa(bwrapSeccompFD))
	}
	args = append(args, egressBwrapArgs(dir, cfg)...)
	args = append(args, "--chdir", insideWorkspace, "--info-fd", "4", "--block-fd", "5", insideEnvd)
	args = append(args, envdArgs(fmt.Sprintf("fd:%d", bwrapListenFD), insideWorkspace, "/tmp", false, cfg.env)...)
	return append(args, egressEnvdArgs(cfg)...)
}

// bwrapProbe is the outcome of running bwrap once.
type bwrapProbe struct {
	ok     bool
	stderr string
}

// probeBwrap runs `bwrap <namespaces> <system dirs> [extra] true` as cred (nil:
// the server's own user) and reports whether it worked and what it said.
func probeBwrap(ctx context.Context, bwrap string, cred *syscall.Credential, extra []string) bwrapProbe {
	truePath, err := exec.LookPath("true")
	if err != nil {
		truePath = "/bin/true"
	}
	args := namespaceArgs("probe", false)
	args = append(args, systemMountArgs()...)
	args = append(args, procDevArgs...)
	args = append(args, extra...)
	args = append(args, truePath)
	cmd := exec.CommandContext(ctx, bwrap, args...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	err = cmd.Run()
	if err == nil {
		return bwrapProbe{ok: true}
	}
	msg := strings.TrimSpace(stderr.String())
	if msg == "" {
		msg = err.Error()
	} else {
		msg = fmt.Sprintf("%s (%v)", msg, err)
	}
	if ctx.Err() != nil {
		msg = fmt.Sprintf("%s: %v", msg, ctx.Err())
	}
	return bwrapProbe{stderr: msg}
}

// bwrapVersion returns `bwrap --version` ("bubblewrap 0.8.0").
func bwrapVersion(ctx context.Context, bwrap string) string {
	cmd := exec.CommandContext(ctx, bwrap, "--version")
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// userNamespaces reports whether the kernel allows user namespaces at all.
func userNamespaces() bool {
	if v := readTrim("/proc/sys/kernel/unprivileged_userns_clone"); v == "0" && os.Geteuid() != 0 {
		return false
	}
	n, err := strconv.Atoi(readTrim("/proc/sys/user/max_user_namespaces"))
	return err == nil && n > 0
}

// errBwrapMissing is BwrapError when bwrap is not installed.
var errBwrapMissing = errors.New("bwrap not found")

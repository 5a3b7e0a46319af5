//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Probe reports what works on this machine for cfg: bwrap (run once with
// every namespace a sandbox uses), the user it can run as, and cgroups. It
// creates the parent cgroups (Config.CgroupName) when it can, and nothing
// else. For doctor.
func Probe(ctx context.Context, cfg Config) Capabilities {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Capabilities{BwrapError: err.Error(), CgroupError: err.Error()}
	}
	sandboxes := filepath.Join(cfg.StateDir, "sandboxes")
	for _, dir := range []string{cfg.StateDir, sandboxes} {
		if fi, err := os.Stat(dir); err != nil || (dropsPrivileges(cfg) && !permits(fi, cfg.HostUID, cfg.HostGID, 0o1)) {
			// Made (searchable) when a Provider starts.
			sandboxes = ""
		}
	}
	r, err := checkReach(cfg, false)
	if err != nil {
		r.envd = cfg.EnvdBinary
	}
	caps, _, _ := probe(ctx, cfg, sandboxes, r)
	return caps
}

// probe finds bwrap, runs it, and detects cgroups. sandboxes, when not empty,
// is bound into the probe sandbox, with the envd binary sandboxes run, to
// check the unprivileged host user can reach them.
func probe(ctx context.Context, cfg Config, sandboxes string, r reach) (Capabilities, *cgroups, *syscall.Credential) {
	caps := Capabilities{SandboxUID: os.Geteuid(), SandboxGID: os.Getegid(), EnvdBinary: r.envd}
	var cred *syscall.Credential
	if path, err := exec.LookPath(cfg.BwrapPath); err != nil {
		caps.BwrapError = fmt.Sprintf("%v: %v", errBwrapMissing, err)
	} else {
		caps.BwrapPath, _ = filepath.Abs(path)
		caps.BwrapVersion = bwrapVersion(ctx, caps.BwrapPath)
		var extra []string
		if sandboxes != "" {
			extra = []string{"--ro-bind", sandboxes, "/.probe/sandboxes"}
		}
		if _, err := os.Stat(r.envd); err == nil {
			extra = append(extra, "--ro-bind", r.envd, "/.probe/envd")
		}
		if dropsPrivileges(cfg) {
			if r.stateErr != nil {
				caps.DropError = fmt.Sprintf("the sandbox user (uid %d) cannot reach the state directory %s: %v", cfg.HostUID, cfg.StateDir, r.stateErr)
				caps.DropFix = dropFix(cfg, r.stateErr)
			} else {
				c := &syscall.Credential{Uid: uint32(cfg.HostUID), Gid: uint32(cfg.HostGID), Groups: []uint32{}}
				if res := probeBwrap(ctx, caps.BwrapPath, c, extra); res.ok {
					caps.BwrapUsable, cred = true, c
					caps.SandboxUID, caps.SandboxGID = cfg.HostUID, cfg.HostGID
				} else {
					caps.DropError = res.stderr
					caps.DropFix = fmt.Sprintf("give uid %d search permission on every directory above %s and %s (chmod o+x), or run the server as a non-root user", cfg.HostUID, cfg.StateDir, r.envd)
				}
			}
		}
		if !caps.BwrapUsable {
			if res := probeBwrap(ctx, caps.BwrapPath, nil, extra); res.ok {
				caps.BwrapUsable = true
			} else {
				caps.BwrapError = res.stderr
			}
		}
	}
	caps.UserNamespaces = caps.BwrapUsable || userNamespaces()

	cg, err := detectCgroups(cfg.Cgroups, cfg.CgroupName)
	switch {
	case err != nil:
		caps.CgroupError = err.Error()
	case cg == nil:
		caps.CgroupError = "cgroups are turned off (Cgroups: off)"
	default:
		caps.CgroupVersion = cg.version
		caps.Freezer, caps.MemoryLimit, caps.PidsLimit, caps.CPULimit = cg.freezer, cg.memory, cg.pids, cg.cpu
	}
	return caps, cg, cred
}

// dropFix says how to let the sandbox user reach the state directory.
func dropFix(cfg Config, err error) string {
	fix := fmt.Sprintf("use a state directory uid %d can reach, such as /var/lib/sandbox-mcp (--state-dir)", cfg.HostUID)
	var ue *unreachableError
	if errors.As(err, &ue) {
		fix += fmt.Sprintf(", or let it search %s: chmod o+x %s", ue.Path, ue.Path)
	}
	return fix
}

// reach is whether the unprivileged sandbox user reaches what bwrap binds.
type reach struct {
	// stateErr is why it cannot reach the state directory (nil: it can, or
	// there is no unprivileged user).
	stateErr error
	// envd is the binary to bind: EnvdBinary, or its copy in the state
	// directory; envdErr is why EnvdBinary itself is out of reach.
	envd    string
	envdErr error
}

// checkReach finds out whether the sandbox user can reach the state
// directory and the envd binary. With install, a binary it cannot reach is
// copied into StateDir/bin (and old copies removed); without, the copy is
// only named. An error means the copy could not be made.
func checkReach(cfg Config, install bool) (reach, error) {
	r := reach{envd: cfg.EnvdBinary}
	if !dropsPrivileges(cfg) {
		return r, nil
	}
	// The state directory itself is made searchable by prepareStateDir.
	if r.stateErr = unreachable(cfg.StateDir, cfg.HostUID, cfg.HostGID, false); r.stateErr != nil {
		// A copy under an unreachable state directory helps nothing.
		return r, nil
	}
	if cfg.embedded != nil {
		// Installed (by New, not by Probe) where the sandbox user reaches
		// it: in StateDir/bin, 0711, as a 0755 file.
		return r, nil
	}
	if r.envdErr = unreachable(cfg.EnvdBinary, cfg.HostUID, cfg.HostGID, true); r.envdErr == nil {
		return r, nil
	}
	binDir := filepath.Join(cfg.StateDir, "bin")
	if !install {
		path, err := copyPath(binDir, cfg.EnvdBinary)
		if err != nil {
			return r, fmt.Errorf("envd binary: %w", err)
		}
		r.envd = path
		return r, nil
	}
	path, err := installCopy(binDir, cfg.EnvdBinary)
	if err != nil {
		return r, fmt.Errorf("install a copy of the envd binary %s in %s: %w", cfg.EnvdBinary, binDir, err)
	}
	// Searchable, not listable, whoever made it.
	_ = os.Chmod(binDir, 0o711)
	removeOldCopies(binDir, path)
	r.envd = path
	return r, nil
}

// hasCapability reports whether the server has capability c in effect.
func hasCapability(c int) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && mask&(1<<uint(c)) != 0
		}
	}
	return false
}

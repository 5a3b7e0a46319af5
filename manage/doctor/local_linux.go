package doctor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

// localChecks probes bubblewrap, user namespaces and cgroups.
func localChecks(ctx context.Context, cfg Config) []Check {
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return localVerdicts(cfg, local.Probe(pctx, local.Config{StateDir: cfg.StateDir, Isolation: cfg.Isolation}))
}

// localVerdicts judges what the probe found. A problem of the local provider
// is a warning (or a failure, for --isolation bwrap without bwrap) only when
// the local provider is the one configured; for another it is skipped.
func localVerdicts(cfg Config, caps local.Capabilities) []Check {
	relevant := cfg.Provider == "" || cfg.Provider == "local"
	var out []Check
	iso := Check{Name: "isolation (bubblewrap)"}
	switch {
	case caps.BwrapUsable:
		iso.Status = OK
		iso.Detail = fmt.Sprintf("%s at %s works (user, pid, ipc, uts, mount and network namespaces)", caps.BwrapVersion, caps.BwrapPath)
		if caps.DropError != "" {
			iso.Status = Warn
			iso.Detail += fmt.Sprintf("; but it cannot run as an unprivileged host user, so sandbox files map to root: %s", caps.DropError)
			iso.Fix = caps.DropFix
			if iso.Fix == "" {
				iso.Fix = "make the state directory reachable by uid 65534 (chmod o+x on its parent directories), or run the server as a non-root user"
			}
		}
	case caps.BwrapPath == "":
		iso.Detail = "bubblewrap is not installed: sandboxes would run WITHOUT isolation"
		iso.Fix = "sudo apt-get install bubblewrap   (Fedora: sudo dnf install bubblewrap)"
	default:
		iso.Detail = fmt.Sprintf("%s is installed but cannot create sandboxes: %s", caps.BwrapVersion, caps.BwrapError)
		iso.Fix = "allow unprivileged user namespaces: sudo sysctl -w kernel.unprivileged_userns_clone=1 (Debian) or sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 24.04+); inside a container, run it with --privileged or a seccomp profile that allows clone(CLONE_NEWUSER)"
	}
	if !caps.BwrapUsable {
		switch {
		case !relevant:
			iso.Status = Skip
		case cfg.Isolation == "bwrap":
			iso.Status = Fail
		default:
			iso.Status = Warn
			iso.Detail += " (with --isolation auto the local provider falls back to none, and says so to the agent)"
		}
	}
	out = append(out, iso)

	userns := Check{Name: "user namespaces", Status: OK, Detail: "available"}
	if !caps.UserNamespaces {
		userns.Status, userns.Detail = Warn, "unprivileged user namespaces look unavailable"
		userns.Fix = "sudo sysctl -w user.max_user_namespaces=15000"
	}
	out = append(out, userns)

	cg := Check{Name: "cgroups (limits and pause)"}
	if caps.CgroupVersion == 0 {
		cg.Status = Warn
		cg.Detail = "no cgroup for sandboxes: " + caps.CgroupError + "; memory/cpu/pids limits do not apply and pause uses SIGSTOP"
		cg.Fix = "run the server as root, or with a delegated cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes sandbox-mcp serve)"
	} else {
		have := map[string]bool{"memory": caps.MemoryLimit, "pids": caps.PidsLimit, "cpu": caps.CPULimit, "freezer": caps.Freezer}
		maps.DeleteFunc(have, func(_ string, ok bool) bool { return !ok })
		cg.Status = OK
		cg.Detail = fmt.Sprintf("cgroup v%d with %s", caps.CgroupVersion, strings.Join(slices.Sorted(maps.Keys(have)), ", "))
		if !caps.Freezer {
			cg.Status, cg.Detail = Warn, cg.Detail+"; no freezer, so pause uses SIGSTOP"
			cg.Fix = "use the unified cgroup v2 hierarchy (Linux 5.2+; boot with systemd.unified_cgroup_hierarchy=1), or mount the cgroup v1 freezer controller"
		}
	}
	out = append(out, cg)
	if !relevant {
		// What the local provider lacks does not matter to another.
		for i := range out {
			if out[i].Status != OK {
				out[i].Status = Skip
				out[i].Detail += "; needed only for --provider local"
			}
		}
	}
	return out
}

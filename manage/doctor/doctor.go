// Package doctor checks a machine for sandbox-mcp: is isolation available,
// are the providers reachable, are the directories writable, which versions
// run. Every problem comes with the command that fixes it. It never fails on
// a half-configured machine: a check that cannot run reports why.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

// Status is a check's verdict.
type Status string

// The verdicts.
const (
	OK   Status = "ok"
	Warn Status = "warn" // works, but not as well as it could
	Fail Status = "fail" // the configured provider cannot work
	Skip Status = "skip" // not relevant to this configuration
)

// Check is one finding.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	// Fix is the command (or step) that fixes a problem.
	Fix string `json:"fix,omitempty"`
}

// Config is what to check.
type Config struct {
	Provider     string // local, docker, e2b
	DockerHost   string // the docker engine (--docker-host); "" means DOCKER_HOST, else the default socket
	Isolation    string // auto, bwrap, none (local)
	StateDir     string
	ArtifactsDir string
	Version      string // sandbox-mcp's version
	EnvdVersion  string
}

// Report is every check, in order.
type Report struct {
	Checks []Check `json:"checks"`
}

// OK reports whether nothing failed.
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return false
		}
	}
	return true
}

// Run performs every check, each bounded in time.
func Run(ctx context.Context, cfg Config) Report {
	var r Report
	add := func(c Check) { r.Checks = append(r.Checks, c) }
	add(Check{Name: "versions", Status: OK, Detail: fmt.Sprintf("sandbox-mcp %s, envd protocol %s, %s %s/%s", cfg.Version, cfg.EnvdVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)})
	add(writable("state directory", cfg.StateDir, "--state-dir"))
	add(writable("artifact store", cfg.ArtifactsDir, "--artifacts-dir"))
	for _, c := range localChecks(ctx, cfg) {
		add(c)
	}
	add(dockerCheck(ctx, cfg))
	add(e2bCheck(ctx, cfg))
	if cfg.Provider != "" && cfg.Provider != "local" && cfg.Provider != "docker" {
		add(Check{Name: "provider", Status: Fail, Detail: fmt.Sprintf("--provider %s is not implemented in this version; local and docker are", cfg.Provider), Fix: "use --provider local or --provider docker"})
	}
	return r
}

// writable checks that dir exists (or can be made) and takes a file.
func writable(name, dir, flag string) Check {
	c := Check{Name: name}
	if dir == "" {
		c.Status, c.Detail = Skip, "not configured"
		return c
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.Status, c.Detail = Fail, fmt.Sprintf("%s cannot be created: %v", dir, err)
		c.Fix = fmt.Sprintf("mkdir -p %s && chown $(id -u) %s, or pick another with %s", dir, dir, flag)
		return c
	}
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		c.Status, c.Detail = Fail, fmt.Sprintf("%s is not writable: %v", dir, err)
		c.Fix = fmt.Sprintf("chown $(id -u) %s, or pick another with %s", dir, flag)
		return c
	}
	f.Close()
	os.Remove(f.Name())
	c.Status, c.Detail = OK, dir+" is writable"
	return c
}

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

// dockerCheck pings the Docker engine.
func dockerCheck(ctx context.Context, cfg Config) Check {
	c := Check{Name: "docker engine"}
	host := cfg.DockerHost
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	relevant := cfg.Provider == "docker"
	var tr http.Transport
	url := "http://docker/_ping"
	switch {
	case strings.HasPrefix(host, "unix://"):
		sock := strings.TrimPrefix(host, "unix://")
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	case strings.HasPrefix(host, "tcp://"):
		url = "http://" + strings.TrimPrefix(host, "tcp://") + "/_ping"
	default:
		c.Status, c.Detail = Warn, fmt.Sprintf("DOCKER_HOST %q is not unix:// or tcp://; not checked", host)
		return c
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
	resp, err := (&http.Client{Transport: &tr}).Do(req)
	if err == nil {
		resp.Body.Close()
	}
	switch {
	case err == nil && resp.StatusCode == http.StatusOK:
		c.Status, c.Detail = OK, "reachable at "+host
	case relevant:
		c.Status = Fail
	default:
		c.Status = Skip
	}
	if c.Status != OK {
		c.Detail = fmt.Sprintf("not reachable at %s (%v); needed only for --provider docker", host, errOrStatus(err, resp))
		c.Fix = "install and start Docker (sudo apt-get install docker.io && sudo systemctl start docker), or use --provider local"
	}
	return c
}

// e2bCheck reaches E2B's API when an API key is configured.
func e2bCheck(ctx context.Context, cfg Config) Check {
	c := Check{Name: "e2b api"}
	key := os.Getenv("E2B_API_KEY")
	relevant := cfg.Provider == "e2b"
	if key == "" {
		c.Status, c.Detail = Skip, "E2B_API_KEY is not set; needed only for --provider e2b"
		if relevant {
			c.Status, c.Fix = Fail, "export E2B_API_KEY=e2b_… (from https://e2b.dev/dashboard)"
		}
		return c
	}
	base := os.Getenv("E2B_API_URL")
	if base == "" {
		domain := os.Getenv("E2B_DOMAIN")
		if domain == "" {
			domain = "e2b.app"
		}
		base = "https://api." + domain
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/health", nil)
	if err != nil {
		c.Status, c.Detail = Fail, fmt.Sprintf("E2B API address %q: %v", base, err)
		return c
	}
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if err == nil && resp.StatusCode/100 == 2 {
		c.Status, c.Detail = OK, "reachable at "+base
		return c
	}
	c.Status = Warn
	if relevant {
		c.Status = Fail
	}
	c.Detail = fmt.Sprintf("not reachable at %s (%v)", base, errOrStatus(err, resp))
	c.Fix = "check the network and E2B_DOMAIN / E2B_API_URL"
	return c
}

func errOrStatus(err error, resp *http.Response) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// WriteText prints the report for people.
func (r Report) WriteText(w io.Writer) {
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%-5s %-27s %s\n", strings.ToUpper(string(c.Status)), c.Name, c.Detail)
		if c.Fix != "" && c.Status != OK && c.Status != Skip {
			fmt.Fprintf(w, "      %-27s fix: %s\n", "", c.Fix)
		}
	}
	if r.OK() {
		fmt.Fprintln(w, "\nThe configured provider can work on this machine.")
	} else {
		fmt.Fprintln(w, "\nThe configured provider cannot work on this machine: see the lines marked FAIL.")
	}
}

// WriteJSON prints the report for machines.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		OK bool `json:"ok"`
		Report
	}{r.OK(), r})
}

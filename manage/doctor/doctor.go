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
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
	"github.com/sandbox-mcp/sandbox-mcp/manage/docker"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2b"
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
	E2BAPIKey    string // the e2b provider's API key (--e2b-api-key or E2B_API_KEY); never printed
	E2BAPIURL    string // the e2b management API's base URL; "" means https://api.e2b.app
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
	if cfg.Provider != "" && cfg.Provider != "auto" && cfg.Provider != "local" && cfg.Provider != "docker" && cfg.Provider != e2b.Name {
		add(Check{Name: "provider", Status: Fail, Detail: fmt.Sprintf("--provider %s is not a provider of this version; local, docker, e2b and auto are", cfg.Provider), Fix: "use --provider local, docker, e2b or auto"})
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

// localUnavailable is the local provider's check on goos/goarch, where it
// cannot run: it needs Linux. That fails when the local provider is the one
// configured, and is skipped for another.
func localUnavailable(cfg Config, goos, goarch string) Check {
	c := Check{Name: "local provider", Status: Skip,
		Detail: fmt.Sprintf("the local provider needs Linux (namespaces and cgroups of this machine), and this is %s/%s", goos, goarch)}
	if cfg.Provider == "" || cfg.Provider == "local" {
		c.Status = Fail
		c.Detail += "; this version has no provider that runs here"
		c.Fix = "use --provider docker (the default here) with " + dockerFix(goos) + "; or --provider e2b"
	}
	return c
}

// linuxEnvdCheck reports the lean Linux envds this binary carries (package
// envdbin): outside Linux, sandboxes are Linux machines elsewhere, and
// their envd comes from the server binary. Carrying none is a warning.
func linuxEnvdCheck(all []*envdbin.Envd) Check {
	c := Check{Name: "linux envd (embedded)"}
	if len(all) == 0 {
		c.Status, c.Detail = Warn, "this binary carries no lean Linux envd: it was built without make"
		c.Fix = "build with make build (or make cross on Linux), which runs make envd first"
		return c
	}
	var have []string
	for _, e := range all {
		have = append(have, fmt.Sprintf("%s (sha256 %s)", e.Name, e.SHA256[:12]))
	}
	c.Status, c.Detail = OK, "carries "+strings.Join(have, ", ")
	return c
}

// dockerCheck pings the Docker engine at --docker-host, else where the
// docker provider looks (docker.ResolveHost: DOCKER_HOST, then the
// platform's usual sockets).
func dockerCheck(ctx context.Context, cfg Config) Check {
	c := Check{Name: "docker engine"}
	host := docker.ResolveHost(cfg.DockerHost)
	relevant := cfg.Provider == "docker"
	err := docker.Ping(ctx, host, 3*time.Second)
	switch {
	case err == nil:
		c.Status, c.Detail = OK, "reachable at "+host
		return c
	case relevant:
		c.Status = Fail
	default:
		c.Status = Skip
	}
	c.Detail = fmt.Sprintf("not reachable at %s (%v); needed only for --provider docker", host, err)
	c.Fix = dockerFix(runtime.GOOS)
	return c
}

// dockerFix says how to get a docker engine on goos.
func dockerFix(goos string) string {
	switch goos {
	case "darwin":
		return "install and start Docker Desktop (https://docs.docker.com/desktop/setup/install/mac-install/), or colima (brew install colima docker && colima start), or OrbStack; or point --docker-host at an engine"
	case "windows":
		return "install and start Docker Desktop with Linux containers (https://docs.docker.com/desktop/setup/install/windows-install/); or point --docker-host at an engine"
	}
	return "install and start Docker (sudo apt-get install docker.io && sudo systemctl start docker), or use --provider local"
}

// e2bCheck makes one authenticated call to E2B's management API when an
// API key is configured: a refused key fails for --provider e2b.
func e2bCheck(ctx context.Context, cfg Config) Check {
	c := Check{Name: "e2b api"}
	relevant := cfg.Provider == e2b.Name
	if cfg.E2BAPIKey == "" {
		c.Status, c.Detail = Skip, "no API key (--e2b-api-key or E2B_API_KEY); needed only for --provider e2b"
		if relevant {
			c.Status, c.Fix = Fail, "export E2B_API_KEY=e2b_… (from https://e2b.dev/dashboard), or pass --e2b-api-key"
		}
		return c
	}
	base := e2b.APIURL(cfg.E2BAPIURL, "")
	fail := Warn
	if relevant {
		fail = Fail
	}
	cli, err := e2b.NewClient(base, cfg.E2BAPIKey, e2b.WithTimeout(5*time.Second), e2b.WithRetries(0))
	if err != nil {
		c.Status, c.Detail, c.Fix = fail, err.Error(), "check --e2b-api-url / E2B_API_URL"
		return c
	}
	err = cli.CheckKey(ctx)
	switch {
	case err == nil:
		c.Status, c.Detail = OK, "the API at "+base+" accepts the key"
	case e2b.IsUnauthorized(err):
		c.Status, c.Detail = fail, "the API at "+base+" refuses the key (401)"
		c.Fix = "check --e2b-api-key / E2B_API_KEY (keys start with e2b_; see https://e2b.dev/dashboard)"
	default:
		c.Status, c.Detail = fail, fmt.Sprintf("the API at %s could not be used: %v", base, err)
		c.Fix = "check the network and --e2b-domain / --e2b-api-url (E2B_DOMAIN / E2B_API_URL)"
	}
	return c
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

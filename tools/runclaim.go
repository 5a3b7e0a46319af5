package tools

import (
	"context"
	"fmt"
	"path"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// Where runs keep their logs, relative to the workspace root. Each run gets
// runsDir/<run_id>/ with stdout.log and stderr.log (foreground) or
// output.log (background); a background process also gets the symlink
// runsDir/<process handle> → <run_id>, so its log can be found from the
// handle alone after a server restart.
const runsDir = ".sandbox-mcp/runs"

// Log file names inside a run's directory.
const (
	stdoutLogName = "stdout.log"
	stderrLogName = "stderr.log"
	outputLogName = "output.log"
)

// runClaim picks a run's directory in the sandbox the first time it is
// needed. Run ids restart at 1 when the server restarts while the sandbox
// lives on, so a directory that already exists is skipped: the counter is
// moved past every run of this generation found there.
type runClaim struct {
	d    *Deps
	key  string
	gen  int64
	root string // workspace root in the sandbox
	cli  *envdclient.Client

	mu      sync.Mutex
	id      string // the run id (tentative until claimed)
	claimed bool
	err     error
}

func newRunClaim(d *Deps, key string, gen int64, root string, cli *envdclient.Client) *runClaim {
	return &runClaim{d: d, key: key, gen: gen, root: root, cli: cli, id: formatRunID(gen, d.runs.next(key))}
}

// ID returns the run id: the claimed one, or the tentative one when no
// directory was needed (a run without output).
func (r *runClaim) ID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

// dirAbs is the absolute run directory of run id.
func (r *runClaim) dirAbs(id string) string { return path.Join(r.root, runsDir, id) }

// claim creates the run's directory and returns it (absolute). It is safe
// for concurrent use; only the first call talks to the sandbox.
func (r *runClaim) claim(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claimed || r.err != nil {
		return r.dirAbs(r.id), r.err
	}
	for attempt := 0; ; attempt++ {
		created, err := r.cli.MakeDir(ctx, r.dirAbs(r.id))
		if err != nil {
			r.err = err
			return "", err
		}
		if created {
			r.claimed = true
			return r.dirAbs(r.id), nil
		}
		if attempt >= 2 {
			r.err = fmt.Errorf("run directories %s keep existing; cannot pick a fresh run id", r.dirAbs(r.id))
			return "", r.err
		}
		// Left over from an earlier server process: skip past all of them.
		highest, err := r.highestRun(ctx)
		if err != nil {
			r.err = err
			return "", err
		}
		n := r.d.runs.next(r.key)
		for n <= highest {
			n = r.d.runs.next(r.key)
		}
		r.id = formatRunID(r.gen, n)
	}
}

// highestRun returns the largest run number of this generation among the
// existing run directories.
func (r *runClaim) highestRun(ctx context.Context) (int64, error) {
	entries, err := r.cli.ListDir(ctx, path.Join(r.root, runsDir), 1)
	if err != nil {
		return 0, err
	}
	var highest int64
	for _, e := range entries {
		ref, ok := parseHandle(e.Name)
		if ok && ref.gen == r.gen && ref.run > highest {
			highest = ref.run
		}
	}
	return highest, nil
}

package tools

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Config holds the operator's limits and choices.
type Config struct {
	// DefaultTimeout applies when the model gives no timeout_sec. Default
	// 60 seconds, and never more than MaxTimeout.
	DefaultTimeout time.Duration
	// MaxTimeout is the ceiling for a model-supplied timeout_sec; larger
	// values are clamped to it and the result says so. Default 10 minutes.
	MaxTimeout time.Duration
	// OutputLimit is the inline output per stream, in bytes (head + tail).
	// Default 32 KiB.
	OutputLimit int
	// MaxPutBytes caps the decoded bytes of one put_files call. Default
	// 64 MiB.
	MaxPutBytes int64
	// MaxReadBytes caps the bytes one read_files call returns. Default
	// 1 MiB.
	MaxReadBytes int64
	// StageRoots maps NAME to an absolute host directory readable through
	// host://NAME/… in stage_inputs. Nothing else on the host is. Default
	// none.
	StageRoots map[string]string
	// ArtifactsDir is the host directory of the artifact store; empty
	// (the default) disables artifact:// and collecting to the store.
	ArtifactsDir string
	// Network is the sandboxes' network policy (the exec tool is
	// open-world unless it is off), shown by workspace_info and the
	// instructions. Default off.
	Network manage.NetworkPolicy
	// Toolsets selects toolsets by name; empty means all.
	Toolsets []string
	// ReadOnly registers only tools that change nothing. Default false.
	ReadOnly bool
	// ProgressInterval is how often a running command reports progress.
	// Default one second.
	ProgressInterval time.Duration
	// SignalGrace is how long process_signal waits after TERM before KILL.
	// Default five seconds.
	SignalGrace time.Duration
	// InputWait bounds how long process_input waits for a process that does
	// not read its input. Default 30 seconds.
	InputWait time.Duration
	// ResultFormat is how a result's text content is written: ResultText
	// (the default) renders it for the model to read, ResultJSON sends the
	// output's JSON, for clients that parse the text.
	ResultFormat ResultFormat
}

// ResultFormat is the form of a result's text content.
type ResultFormat string

// The result formats: text for the model (the zero value means it too), or
// the output's JSON.
const (
	ResultText ResultFormat = "text"
	ResultJSON ResultFormat = "json"
)

// ParseResultFormat returns the format named s: "text" or "json".
func ParseResultFormat(s string) (ResultFormat, error) {
	switch f := ResultFormat(s); f {
	case ResultText, ResultJSON:
		return f, nil
	}
	return "", fmt.Errorf("result format %q: want text or json", s)
}

// DefaultConfig returns the usual limits: commands time out after 60
// seconds by default and after 10 minutes at most, show 32 KiB of output
// per stream inline and report progress every second; one put_files call
// writes up to 64 MiB and one read_files call returns up to 1 MiB;
// process_signal waits five seconds after TERM and process_input 30 seconds
// for a process to read. It allows no host directory, no artifact store and
// no network, and selects every toolset, writes included. NewDeps takes
// each zero limit of a Config from it.
func DefaultConfig() Config {
	return Config{
		DefaultTimeout:   60 * time.Second,
		MaxTimeout:       10 * time.Minute,
		OutputLimit:      32 << 10,
		MaxPutBytes:      64 << 20,
		MaxReadBytes:     1 << 20,
		ProgressInterval: time.Second,
		SignalGrace:      5 * time.Second,
		InputWait:        30 * time.Second,
	}
}

// Deps is what the tools need: the sandbox manager, the limits, a logger.
type Deps struct {
	Manager *manage.Manager
	Config  Config
	Logger  *slog.Logger

	runs  runCounter
	procs processRegistry
	shell shellCache
	dirs  shellDirs
	// helpers remembers where each sandbox's search helper is.
	helpers helperCache
	// journals completes or undoes batches a crashed server left half
	// done, once per sandbox (putjournal.go).
	journals journalRecovery
}

// NewDeps returns Deps with defaults filled in for zero Config fields.
func NewDeps(m *manage.Manager, cfg Config, log *slog.Logger) *Deps {
	def := DefaultConfig()
	orDefault(&cfg.DefaultTimeout, def.DefaultTimeout)
	orDefault(&cfg.MaxTimeout, def.MaxTimeout)
	cfg.DefaultTimeout = min(cfg.DefaultTimeout, cfg.MaxTimeout)
	orDefault(&cfg.OutputLimit, def.OutputLimit)
	orDefault(&cfg.MaxPutBytes, def.MaxPutBytes)
	orDefault(&cfg.MaxReadBytes, def.MaxReadBytes)
	orDefault(&cfg.ProgressInterval, def.ProgressInterval)
	orDefault(&cfg.SignalGrace, def.SignalGrace)
	orDefault(&cfg.InputWait, def.InputWait)
	if log == nil {
		log = slog.Default()
	}
	restrictArtifactStore(cfg.ArtifactsDir, log)
	return &Deps{Manager: m, Config: cfg, Logger: log}
}

// orDefault sets *v to def unless *v is positive.
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// EndSession forgets what the tools keep in memory for workspace key: its
// background processes, its run counter and its shell's directory. The server calls it when it
// applies the end-of-session policy (Manager.EndSession) to key. A named
// workspace used again later re-finds its processes in the sandbox, as
// after a server restart.
func (d *Deps) EndSession(key string) {
	d.procs.drop(key)
	d.runs.drop(key)
	d.dirs.drop(key)
}

// runCounter numbers runs per workspace key.
type runCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

func (r *runCounter) next(key string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int64{}
	}
	r.n[key]++
	return r.n[key]
}

// drop forgets key's count (its session ended).
func (r *runCounter) drop(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.n, key)
}

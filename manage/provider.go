// Package manage owns sandbox lifecycle: the Provider interface, which a back
// end implements to make and control sandboxes (package manage/local does,
// with sandboxes on this host), and the Manager that maps workspace keys to
// sandboxes, detects and confirms lost sandboxes, replaces them (once, and
// never replaying the failed operation), pauses idle ones and resumes them on
// the next call, and records it all in a Store that outlives the process.
package manage

import (
	"context"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
)

// State is a sandbox's lifecycle state as a provider reports it.
type State string

// The states a provider reports.
const (
	// StateRunning: reachable, processes running.
	StateRunning State = "running"
	// StatePaused: frozen with its processes; Resume brings them back.
	StatePaused State = "paused"
	// StateStopped: its files exist but nothing runs (a local sandbox after a
	// server restart); Resume starts it afresh and its processes from before
	// are gone.
	StateStopped State = "stopped"
	// StateGone: it does not exist any more (killed, expired, deleted).
	StateGone State = "gone"
)

// Terminal reports whether s means the sandbox cannot come back.
func (s State) Terminal() bool { return s == StateGone }

// Limits bounds a sandbox's resources. Zero values mean the provider default.
type Limits struct {
	MemoryBytes int64   // memory ceiling
	CPUs        float64 // CPU share, in cores
	Pids        int64   // process count ceiling
	NoFile      uint64  // open files per process (RLIMIT_NOFILE)
}

// Or returns l with each zero field taken from def: a sandbox's own limits
// over a provider's defaults.
func (l Limits) Or(def Limits) Limits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = def.MemoryBytes
	}
	if l.CPUs == 0 {
		l.CPUs = def.CPUs
	}
	if l.Pids == 0 {
		l.Pids = def.Pids
	}
	if l.NoFile == 0 {
		l.NoFile = def.NoFile
	}
	return l
}

// SandboxConfig is what a sandbox is created with. A replacement after a
// loss is created with the same config.
type SandboxConfig struct {
	// Key is the workspace key the sandbox serves (for names and labels).
	Key string
	// Named marks a workspace that survives sessions and restarts.
	Named bool
	// Generation is the generation the sandbox will serve the workspace
	// as (for labels; the Manager fills it in).
	Generation int64
	// Env is given to every process in the sandbox.
	Env map[string]string
	// Network is the sandbox's network access: off (the zero value), on,
	// or an allow list. A provider that cannot enforce a policy refuses it.
	Network NetworkPolicy
	// Limits bounds resources.
	Limits Limits
	// Template is the provider-specific image or template ("" for default).
	Template string
	// Lifetime is how long a provider whose sandboxes expire on their own
	// keeps one alive without activity; 0 means the provider default. The
	// local provider's sandboxes do not expire, and it ignores Lifetime.
	Lifetime time.Duration
}

// Sandbox describes one sandbox as a provider sees it.
type Sandbox struct {
	// ID is the provider's id (lowercase alphanumeric).
	ID string
	// Provider is the name of the provider that made it (Provider.Name).
	Provider string
	// State is the lifecycle state.
	State State
	// Detail explains State in a few words ("not found", "daemon exited with
	// status 1"), for notices and logs.
	Detail string
	// CreatedAt is when the sandbox was created.
	CreatedAt time.Time
	// Isolation says how the sandbox is isolated, in the provider's words
	// (the local provider's are "bwrap" and "none").
	Isolation string
	// Workdir is the workspace root inside the sandbox ("/workspace").
	Workdir string
	// EnvdVersion is the version of the daemon inside.
	EnvdVersion string
	// Warnings are things a person or an agent must be told (for example
	// that nothing isolates this sandbox from the host).
	Warnings []string
	// WorkspaceKept is set by Create when the new sandbox's workspace
	// directory already holds the files of an earlier sandbox of the same
	// key (a named workspace kept in a docker volume): a replacement then
	// has its predecessor's workspace files, and nothing else of it (not
	// its installed packages, other files or processes).
	WorkspaceKept bool
	// Network is the network policy the sandbox was made with, when the
	// provider knows it (nil otherwise).
	Network *NetworkPolicy
	// EndedAt is when the sandbox stopped or was lost, when the provider
	// knows it (zero otherwise). The Manager uses it to tell an operation
	// that certainly never ran from one that may have partly run.
	EndedAt time.Time
}

// Endpoint says how to reach a sandbox's envd.
type Endpoint struct {
	// URL is "unix:/path", "http://127.0.0.1:port" or "https://host".
	URL string
	// AccessToken goes in X-Access-Token when set.
	AccessToken string
	// RoutingID and RoutingPort, when set, go in the E2b-Sandbox-Id and
	// E2b-Sandbox-Port headers, for a host that serves many sandboxes' envd
	// behind one address (as E2B's does).
	RoutingID   string
	RoutingPort int
	// User is the user processes run as ("" for envd's default).
	User string
	// EnvdVersion is the daemon's version, when the provider knows it.
	EnvdVersion string
	// ClientOptions are further options of the client that reaches this
	// endpoint, which the provider needs (the local provider's check of
	// its socket paths).
	ClientOptions []envdclient.Option
}

// Provider creates and controls sandboxes. Implementations must be safe for
// concurrent use. Every method honours ctx; the Manager bounds each call with
// a timeout, so an implementation must return when ctx ends.
type Provider interface {
	// Name returns the provider's name ("local" for package manage/local),
	// which the Store records with each sandbox.
	Name() string
	// Create makes a new running sandbox.
	Create(ctx context.Context, cfg SandboxConfig) (Sandbox, error)
	// Info reports a sandbox's state. A sandbox that does not exist is
	// reported as StateGone with a nil error; an error means the state
	// could not be learned (inconclusive), and the Manager then assumes
	// nothing.
	Info(ctx context.Context, id string) (Sandbox, error)
	// Endpoint says how to reach the sandbox's envd.
	Endpoint(ctx context.Context, id string) (Endpoint, error)
	// Pause freezes a running sandbox. Pausing a paused one is a no-op.
	Pause(ctx context.Context, id string) error
	// Resume brings a paused or stopped sandbox back to running. Resuming a
	// running one is a no-op.
	Resume(ctx context.Context, id string) error
	// Kill destroys a sandbox and its files. Killing a gone one is a no-op.
	Kill(ctx context.Context, id string) error
	// List returns the provider's sandboxes.
	List(ctx context.Context) ([]Sandbox, error)
}

// KeepAliver is implemented by providers whose sandboxes end on their own
// when a time to live runs out (E2B's). While operations hold leases on a
// sandbox, the Manager calls KeepAlive when the first lease is taken and
// then every KeepAliveInterval until the last one is released, so a long
// command is not cut off by the provider's timeout. A failed KeepAlive is
// logged and changes nothing: the operation goes on, and a loss, if that is
// what it was, shows in the operation's own error.
type KeepAliver interface {
	// KeepAlive extends sandbox id's time to live.
	KeepAlive(ctx context.Context, id string) error
	// KeepAliveInterval is how often KeepAlive is called while a lease is
	// held; a lease taken within this long of the last call does not call
	// it again.
	KeepAliveInterval() time.Duration
}

package manage

// EventKind names something that happened to a workspace's sandbox while an
// operation was acquiring it.
type EventKind int

// The events a Lease can carry.
const (
	// EventCreated: the workspace's first sandbox was created.
	EventCreated EventKind = iota + 1
	// EventResumed: a paused sandbox was resumed; processes kept running.
	EventResumed
	// EventRestarted: a stopped sandbox was started again with a new
	// daemon; files are kept, processes from before are gone.
	EventRestarted
	// EventRecreated: the sandbox was replaced after a loss, before this
	// operation (which runs in the replacement).
	EventRecreated
	// EventReset: the sandbox was destroyed and a fresh one created on
	// request (workspace_reset).
	EventReset
	// EventUnisolated: the first operation on a sandbox nothing isolates.
	EventUnisolated
	// EventStoreRebuilt: the server's store file was damaged and rebuilt
	// from the sandboxes on disk. FilesKept says this workspace's sandbox
	// was found and recovered; without it, none was found (a named
	// workspace's files from before, if it had any, are lost).
	EventStoreRebuilt
)

// String returns the kind's name as logs show it ("created", "resumed", …;
// "unknown" for a value that names no kind).
func (k EventKind) String() string {
	switch k {
	case EventCreated:
		return "created"
	case EventResumed:
		return "resumed"
	case EventRestarted:
		return "restarted"
	case EventRecreated:
		return "recreated"
	case EventReset:
		return "reset"
	case EventUnisolated:
		return "unisolated"
	case EventStoreRebuilt:
		return "store-rebuilt"
	}
	return "unknown"
}

// Event is one lifecycle happening, for the tools to turn into a notice.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// PrevGeneration and Generation are the generations before and after
	// the event (the same for a resume). PrevGeneration is 0 when there was
	// no sandbox before, and for EventUnisolated, which carries only
	// Generation.
	PrevGeneration int64
	Generation     int64
	// State and Detail describe the previous sandbox for EventRecreated.
	State  State
	Detail string
	// FilesKept is true for a recreation that kept the files.
	FilesKept bool
	// OnlyWorkspaceKept is true when only the workspace directory's files
	// were kept (see LostError.OnlyWorkspaceKept).
	OnlyWorkspaceKept bool
	// Warnings are the sandbox's warnings (EventUnisolated).
	Warnings []string
}

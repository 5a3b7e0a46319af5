package tools

import (
	"fmt"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// lostNotice tells the agent its sandbox was lost, what was kept, and
// whether the failed operation ran: the sentence that makes a model re-check
// its environment instead of acting on files that are gone.
func lostNotice(le *manage.LostError) string {
	why := lostReason(le)
	var b strings.Builder
	switch {
	case le.Replaced && le.OnlyWorkspaceKept:
		fmt.Fprintf(&b, "The sandbox was recreated (generation %d → %d) because %s. %s", le.PrevGeneration, le.Generation, why, workspaceKeptText)
	case le.Replaced && le.FilesKept:
		fmt.Fprintf(&b, "The sandbox was restarted (generation %d → %d) because %s. Files in the workspace were kept, but running processes from before are gone.", le.PrevGeneration, le.Generation, why)
	case le.Replaced:
		fmt.Fprintf(&b, "The sandbox was recreated (generation %d → %d) because %s. Files, installed packages and running processes from before are lost.", le.PrevGeneration, le.Generation, why)
	case le.ReplaceErr != nil:
		fmt.Fprintf(&b, "The sandbox was lost (generation %d) because %s, and making a new one failed: %v. The next call will try again.", le.PrevGeneration, why, le.ReplaceErr)
	default:
		fmt.Fprintf(&b, "The sandbox is gone (generation %d) because %s. Automatic recreation is off on this server: call workspace_reset to start a fresh sandbox.", le.PrevGeneration, why)
	}
	if le.NotRun {
		b.WriteString(" This command was NOT run.")
	} else {
		b.WriteString(" This command may have partly run before the sandbox was lost; check for its side effects before running it again.")
	}
	if le.Replaced {
		b.WriteString(" Check that the files and tools you need exist before continuing.")
	}
	return b.String()
}

func lostReason(le *manage.LostError) string {
	detail := le.Detail
	if detail == "" || detail == string(le.State) {
		detail = string(le.State)
	}
	switch le.State {
	case manage.StateStopped:
		return fmt.Sprintf("its daemon stopped (%s)", detail)
	default:
		return fmt.Sprintf("the previous one was gone (state: %s)", detail)
	}
}

// eventNotice renders a lifecycle event a call saw while acquiring the
// sandbox; "" when the agent need not hear of it.
func eventNotice(ev manage.Event) string {
	switch ev.Kind {
	case manage.EventResumed:
		return "The sandbox had been paused while idle and was resumed; files and running processes are as they were."
	case manage.EventRestarted:
		return fmt.Sprintf("The sandbox was restarted from its saved files (generation %d → %d): files in the workspace are kept, but processes from before (background servers, shells) are gone.", ev.PrevGeneration, ev.Generation)
	case manage.EventRecreated:
		what := "Files, installed packages and running processes from before are lost."
		switch {
		case ev.OnlyWorkspaceKept:
			what = workspaceKeptText
		case ev.FilesKept:
			what = "Files in the workspace were kept, but running processes from before are gone."
		}
		return fmt.Sprintf("The sandbox was recreated (generation %d → %d) before this call because the previous one was lost (%s). %s This call ran in the new sandbox.", ev.PrevGeneration, ev.Generation, ev.Detail, what)
	case manage.EventReset:
		return fmt.Sprintf("The workspace was reset (generation %d → %d): this is a fresh sandbox and files from before are gone.", ev.PrevGeneration, ev.Generation)
	case manage.EventCreated:
		if ev.PrevGeneration > 0 {
			return fmt.Sprintf("A new sandbox was created (generation %d); files and processes of the previous one (generation %d) are lost.", ev.Generation, ev.PrevGeneration)
		}
	case manage.EventUnisolated:
		return strings.Join(ev.Warnings, " ")
	case manage.EventStoreRebuilt:
		const rebuilt = "The server's state file was damaged and rebuilt from the sandboxes the provider still has"
		switch {
		case ev.FilesKept:
			return rebuilt + "; this workspace's sandbox and its files were recovered."
		case ev.OnlyWorkspaceKept:
			return rebuilt + ", and no sandbox of this workspace was found: this is a new sandbox. " + workspaceKeptText
		}
		return rebuilt + ", and no sandbox of this workspace was found: this is a new, empty sandbox, and files this workspace had before, if any, are lost."
	}
	return ""
}

// workspaceKeptText says what a new sandbox on a kept workspace volume
// has of its predecessor.
const workspaceKeptText = "Files in the workspace directory were kept (this workspace keeps them in a volume), but installed packages, changes outside the workspace and running processes from before are gone."

// clampNotice says a timeout was lowered to the ceiling; background says
// the server runs background processes, which longer work should be.
func clampNotice(asked, ceiling time.Duration, background bool) string {
	if !background {
		return fmt.Sprintf("timeout_sec %d was clamped to the server's ceiling of %d s.", int64(asked/time.Second), int64(ceiling/time.Second))
	}
	return fmt.Sprintf("timeout_sec %d was clamped to the server's ceiling of %d s; for longer work start the command with background: true and follow it with process_output.",
		int64(asked/time.Second), int64(ceiling/time.Second))
}

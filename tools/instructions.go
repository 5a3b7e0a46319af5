package tools

import (
	"fmt"
	"strings"
)

// Instructions returns the server instructions (the MCP `instructions`
// field): what the workspace is, its limits, and what the notices mean. It
// speaks only of the tools the server offers (Config.Toolsets, ReadOnly).
func Instructions(cfg Config) string {
	offers := func(toolset string) bool {
		return cfg.hasToolset(toolset) && (!cfg.ReadOnly || toolset == ToolsetFiles || toolset == ToolsetAdmin)
	}
	exec := offers(ToolsetExec)
	background := exec && offers(ToolsetProcess)
	files := cfg.hasToolset(ToolsetFiles)
	transfer := offers(ToolsetTransfer)
	var can []string
	if exec {
		can = append(can, "run commands")
	}
	if background {
		can = append(can, "run background processes")
	}
	switch {
	case files && cfg.ReadOnly:
		can = append(can, "read and list files")
	case files:
		can = append(can, "keep files between calls")
	}
	if transfer {
		can = append(can, "move files in and out")
	}
	var b strings.Builder
	b.WriteString("This server gives you a real sandbox: a private Linux workspace")
	if len(can) > 0 {
		b.WriteString(" where you can " + joinAnd(can))
	}
	b.WriteString(".")
	if cfg.ReadOnly {
		b.WriteString(" This server is read-only: its tools look at the workspace and change nothing in it.")
	}
	b.WriteString("\n\n")
	root := "the workspace root"
	if cfg.hasToolset(ToolsetAdmin) {
		root = "the workspace root (workspace_info shows it)"
	}
	b.WriteString("Workspace: paths are relative to " + root + ". Paths that leave it (.., absolute paths elsewhere, symlinks pointing outside) are refused. Files and installed packages persist between calls until the sandbox is reset or lost.\n\n")
	if exec {
		b.WriteString("Shell: each workspace_exec command runs in a fresh shell. The working directory persists: a cd in one command carries over to the next, and each result shows the cwd; a reset or a new sandbox starts again at the workspace root. Nothing else persists between commands: exported variables, shell variables, aliases and functions are gone in the next call, so set them in the same command line (or pass env).\n\n")
		fmt.Fprintf(&b, "Limits: a command waits at most timeout_sec (default %d s, ceiling %d s; larger values are clamped and the result says so); at its timeout it is killed with whatever it left running. ",
			int64(cfg.DefaultTimeout.Seconds()), int64(cfg.MaxTimeout.Seconds()))
		if background {
			b.WriteString("For longer work, start it with background: true: the start returns the first output (and an error result if it failed at once); follow it with process_output, and answer a prompt with process_input and wait_sec. ")
		}
		fmt.Fprintf(&b, "Each output stream is shown inline up to %d bytes (head and tail); the whole output is kept in a log file whose path the result gives", cfg.OutputLimit)
		if files {
			b.WriteString(", readable with read_files")
		}
		b.WriteString(".\n\n")
	}
	if files {
		if cfg.ReadOnly {
			b.WriteString("Files: find text with search_files (a regex search, bounded, skipping binary files and .git).\n\n")
		} else {
			b.WriteString("Files: find text with search_files (a regex search, bounded, skipping binary files and .git), change part of a file with edit_file (exact search and replace: read the lines first, copy old_text exactly), and create or rewrite whole files with put_files.\n\n")
		}
	}
	b.WriteString(networkPolicyLine(cfg.Network) + "\n\n")
	b.WriteString("Notices: lines starting with NOTICE: come first in a result and also in its notices field. Read them. The most important one says the sandbox was recreated: files, packages and processes from before are gone, and it says whether your command was NOT run or may have partly run. After it, check that what you need exists before continuing. Other notices report a clamped timeout, truncated output, a sandbox resumed after an idle pause, or a sandbox without isolation.\n\n")
	if transfer && cfg.ArtifactsDir != "" {
		b.WriteString("Artifacts: collect_outputs copies files out of the sandbox into an artifact store that survives the sandbox; stage_inputs with artifact://NAME brings them back, for example after a recreation.\n")
	}
	if transfer && len(cfg.StageRoots) > 0 {
		lists := ""
		if cfg.hasToolset(ToolsetAdmin) {
			lists = " (workspace_info lists them)"
		}
		b.WriteString("Host inputs: stage_inputs can copy from host://ROOT/path for the roots the operator allowed" + lists + ".\n")
	}
	return strings.TrimSpace(b.String())
}

// joinAnd joins items as a sentence does: "a", "a and b", "a, b and c".
func joinAnd(items []string) string {
	if len(items) <= 1 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

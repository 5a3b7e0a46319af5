package tools

import (
	"fmt"
	"strings"
)

// Instructions returns the server instructions (the MCP `instructions`
// field): what the workspace is, its limits, and what the notices mean.
func Instructions(cfg Config) string {
	var b strings.Builder
	b.WriteString("This server gives you a real sandbox: a private Linux workspace where you can run commands, keep files between calls, run background processes, and move files in and out.\n\n")
	b.WriteString("Workspace: paths are relative to the workspace root (workspace_info shows it). Paths that leave it (.., absolute paths elsewhere, symlinks pointing outside) are refused. Files and installed packages persist between calls until the sandbox is reset or lost.\n\n")
	b.WriteString("Shell: each workspace_exec command runs in a fresh shell. The working directory persists: a cd in one command carries over to the next, and each result shows the cwd; a reset or a new sandbox starts again at the workspace root. Nothing else persists between commands: exported variables, shell variables, aliases and functions are gone in the next call, so set them in the same command line (or pass env).\n\n")
	if want, _ := wantedToolsets(cfg.Toolsets); want == nil || want[ToolsetFiles] {
		if cfg.ReadOnly {
			b.WriteString("Files: find text with search_files (a regex search, bounded, skipping binary files and .git).\n\n")
		} else {
			b.WriteString("Files: find text with search_files (a regex search, bounded, skipping binary files and .git), change part of a file with edit_file (exact search and replace: read the lines first, copy old_text exactly), and create or rewrite whole files with put_files.\n\n")
		}
	}
	fmt.Fprintf(&b, "Limits: a command waits at most timeout_sec (default %d s, ceiling %d s; larger values are clamped and the result says so). For longer work, start it with background: true and follow it with process_output. Each output stream is shown inline up to %d bytes (head and tail); the whole output is kept in a log file whose path the result gives, readable with read_files.\n\n",
		int64(cfg.DefaultTimeout.Seconds()), int64(cfg.MaxTimeout.Seconds()), cfg.OutputLimit)
	b.WriteString(networkPolicyLine(cfg.Network) + "\n\n")
	b.WriteString("Notices: lines starting with NOTICE: come first in a result and also in its notices field. Read them. The most important one says the sandbox was recreated: files, packages and processes from before are gone, and it says whether your command was NOT run or may have partly run. After it, check that what you need exists before continuing. Other notices report a clamped timeout, truncated output, a sandbox resumed after an idle pause, or a sandbox without isolation.\n\n")
	if cfg.ArtifactsDir != "" {
		b.WriteString("Artifacts: collect_outputs copies files out of the sandbox into an artifact store that survives the sandbox; stage_inputs with artifact://NAME brings them back, for example after a recreation.\n")
	}
	if len(cfg.StageRoots) > 0 {
		b.WriteString("Host inputs: stage_inputs can copy from host://ROOT/path for the roots the operator allowed (workspace_info lists them).\n")
	}
	return strings.TrimSpace(b.String())
}

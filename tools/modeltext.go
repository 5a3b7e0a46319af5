package tools

import (
	"fmt"
	"strconv"
	"strings"
)

// The ModelText methods: what the model reads of each result (see
// ModelTexter). A status line comes first, in short clauses joined by " · ",
// then whatever the tool returned as literal text. structuredContent keeps
// every field; the text leaves out what says nothing to a reader (false
// flags, zero counts, timestamps).

// statusLine joins the non-empty clauses of a status line.
func statusLine(parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, " · ")
}

// durationText renders a duration in milliseconds for a status line
// ("12 ms", "3.4 s", "2 min 5 s").
func durationText(ms int64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case ms < 60_000:
		return strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64) + " s"
	}
	s := ms / 1000
	return fmt.Sprintf("%d min %d s", s/60, s%60)
}

// withNewline returns s ending in a newline (unless it is empty).
func withNewline(s string) string {
	if s == "" || strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

// ModelText renders workspace_exec's result: one status line (exit code,
// duration, truncation, totals and logs of cut streams, cwd), then stdout
// and stderr as they are; a stream gets a label line only when both have
// text, or when stderr alone does.
func (o *execOutput) ModelText() string {
	var b strings.Builder
	if o.Process != "" {
		log := ""
		if o.FullOutput != nil {
			log = "log " + o.FullOutput.Output
		}
		b.WriteString(statusLine("started in the background: process "+o.Process, fmt.Sprintf("pid %d", o.Pid), log, cwdText(o.Cwd)))
		b.WriteString("\nFollow it with process_output, write to it with process_input, stop it with process_signal.")
		return b.String()
	}
	exit := ""
	switch {
	case o.TimedOut:
		exit = fmt.Sprintf("timed out after %d s and killed", o.TimeoutSec)
		if o.ExitCode != nil {
			exit += fmt.Sprintf(" (exit %d)", *o.ExitCode)
		}
	case o.ExitCode != nil && o.Signal != "":
		exit = fmt.Sprintf("exit %d (signal: %s)", *o.ExitCode, o.Signal)
	case o.ExitCode != nil:
		exit = fmt.Sprintf("exit %d", *o.ExitCode)
	}
	stdout, stderr := derefText(o.Stdout), derefText(o.Stderr)
	var logs [2]string
	if o.FullOutput != nil {
		logs = [2]string{o.FullOutput.Stdout, o.FullOutput.Stderr}
	}
	cut := [2]string{
		streamCutText("stdout", o.StdoutTruncated, o.StdoutTotalBytes, logs[0]),
		streamCutText("stderr", o.StderrTruncated, o.StderrTotalBytes, logs[1]),
	}
	none := ""
	if stdout == "" && stderr == "" {
		none = "no output"
	}
	b.WriteString(statusLine(exit, durationText(o.DurationMs), cut[0], cut[1], none, cwdText(o.Cwd)))
	b.WriteByte('\n')
	switch {
	case stdout != "" && stderr != "":
		b.WriteString("--- stdout ---\n")
		b.WriteString(withNewline(stdout))
		b.WriteString("--- stderr ---\n")
		b.WriteString(withNewline(stderr))
	case stderr != "":
		b.WriteString("--- stderr ---\n")
		b.WriteString(withNewline(stderr))
	default:
		b.WriteString(withNewline(stdout))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// cwdText is the cwd clause of workspace_exec's status line.
func cwdText(cwd string) string {
	if cwd == "" {
		return ""
	}
	return "cwd " + cwd
}

// streamCutText is the status clause of a stream whose middle was cut.
func streamCutText(stream string, truncated bool, total *int64, log string) string {
	if !truncated || total == nil {
		return ""
	}
	s := fmt.Sprintf("%s %s bytes, middle cut", stream, groupDigits(*total))
	if log != "" {
		s += " (whole in " + log + ")"
	}
	return s
}

func derefText(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ModelText renders read_files' result: a line per file saying what was
// read and how to read on; the contents follow in blocks of their own, in
// the same order (each entry's content_index).
func (o *readFilesOutput) ModelText() string {
	var b strings.Builder
	blocks := 0
	for i, f := range o.Files {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(f.modelLine())
		if f.ContentIdx > 0 {
			blocks++
		}
	}
	switch {
	case blocks == 1 && len(o.Files) == 1:
		b.WriteString("\nThe content follows.")
	case blocks > 0:
		b.WriteString("\nThe contents follow, one block per file, in this order.")
	}
	return b.String()
}

// modelLine is one file's line in read_files' text.
func (f *readFileEntry) modelLine() string {
	if f.Error != "" {
		return f.Path + ": error: " + f.Error
	}
	var what string
	switch {
	case f.Encoding == "image":
		what = fmt.Sprintf("%s image, %s bytes", f.MimeType, groupDigits(f.Bytes))
	case f.Lines > 0 || f.StartLine > 0 && f.Bytes > 0:
		what = fmt.Sprintf("lines %d-%d", f.StartLine, f.StartLine+max(f.Lines, 1)-1)
		what += fmt.Sprintf(" (%s bytes of %s)", groupDigits(f.Bytes), groupDigits(f.Size))
	case f.Bytes == 0 && f.Size == 0:
		what = "empty file"
	case f.Bytes == 0:
		what = fmt.Sprintf("nothing read (%s bytes in the file)", groupDigits(f.Size))
	case f.Offset == 0 && f.Bytes == f.Size:
		what = fmt.Sprintf("whole file, %s bytes", groupDigits(f.Size))
	default:
		what = fmt.Sprintf("bytes %d-%d of %s", f.Offset, f.Offset+f.Bytes, groupDigits(f.Size))
	}
	if f.Encoding == "base64" {
		what += ", as base64"
	}
	if f.LineNumbers {
		what += ", numbered"
	}
	parts := []string{what}
	if f.Truncated {
		parts = append(parts, "more: "+f.continuation())
	}
	if f.Note != "" {
		parts = append(parts, f.Note)
	}
	return f.Path + ": " + strings.Join(parts, " · ")
}

// continuation is how to read on after a truncated entry, as arguments.
func (f *readFileEntry) continuation() string {
	if f.NextLine > 0 {
		return fmt.Sprintf("start_line %d", f.NextLine)
	}
	if f.NextOffset != nil {
		return fmt.Sprintf("offset %d", *f.NextOffset)
	}
	return "read it in another call"
}

// ModelText renders list_files' result: a header, then one entry a line:
// directories end in /, files show their size in bytes (and mode when executable),
// symlinks their target.
func (o *listFilesOutput) ModelText() string {
	var b strings.Builder
	head := fmt.Sprintf("%s: %d entries", o.Path, len(o.Entries))
	if o.Truncated {
		head = fmt.Sprintf("%s: %d of %d entries", o.Path, len(o.Entries), o.Total)
		if o.NextOffset > 0 {
			head += fmt.Sprintf(" · more: offset %d", o.NextOffset)
		}
	}
	b.WriteString(head)
	for _, e := range o.Entries {
		b.WriteByte('\n')
		b.WriteString(e.modelLine())
	}
	return b.String()
}

// modelLine is one entry's line in list_files' text.
func (e fileEntry) modelLine() string {
	switch e.Type {
	case "dir":
		return e.Path + "/"
	case "symlink":
		return e.Path + " -> " + e.SymlinkTarget
	case "file":
		s := e.Path + "  " + strconv.FormatInt(e.Size, 10)
		if m, err := strconv.ParseUint(e.Mode, 8, 32); err == nil && m&0o111 != 0 {
			s += "  " + e.Mode
		}
		return s
	}
	return e.Path + "  (" + e.Type + ")"
}

// statusText renders a process's status for a status line ("running", "exited,
// exit 0", "killed by timeout, exit 137").
func (s processStatus) statusText() string {
	t := s.Status
	switch {
	case s.TimedOut:
		t += " by its timeout"
	case s.Signal != "":
		t += " (" + s.Signal + ")"
	}
	if s.ExitCode != nil {
		t += fmt.Sprintf(", exit %d", *s.ExitCode)
	}
	if s.Detail != "" {
		t += " (" + s.Detail + ")"
	}
	return t
}

// ModelText renders process_output's result: a status line, then the
// output as it is.
func (o *processOutputOutput) ModelText() string {
	more := ""
	switch {
	case o.EOF:
		more = "end of output"
	case o.Truncated:
		more = fmt.Sprintf("more available: offset %d", o.NextOffset)
	default:
		more = fmt.Sprintf("next offset %d", o.NextOffset)
	}
	rng := fmt.Sprintf("bytes %d-%d of %s", o.Offset, o.NextOffset, groupDigits(o.TotalBytes))
	if o.Output == "" {
		rng = "no new output"
	}
	line := statusLine("process "+o.Process+" "+o.statusText(), rng, more, "log "+o.Log)
	if o.Output == "" {
		return line
	}
	return line + "\n" + strings.TrimSuffix(o.Output, "\n")
}

// ModelText renders process_input's result.
func (o *processInputOutput) ModelText() string {
	s := fmt.Sprintf("wrote %d bytes to the stdin of %s", o.Written, o.Process)
	if o.Closed {
		s += "; stdin is now closed"
	}
	return s
}

// ModelText renders process_signal's result.
func (o *processSignalOutput) ModelText() string {
	sent := "nothing sent"
	if len(o.Sent) > 0 {
		sent = "sent " + strings.Join(o.Sent, ", then ")
	}
	if o.AlreadyEnded {
		sent = "it had already ended; nothing sent"
	}
	return statusLine("process "+o.Process, sent, "now "+o.statusText())
}

// ModelText renders process_list's result: a line per process.
func (o *processListOutput) ModelText() string {
	var b strings.Builder
	if len(o.Processes) == 0 {
		b.WriteString("no background processes")
	}
	for i, p := range o.Processes {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(statusLine(p.Process, fmt.Sprintf("pid %d", p.Pid), p.statusText(), p.Command, "log "+p.Log))
	}
	if len(o.Others) > 0 {
		b.WriteString("\nother processes:")
		for _, p := range o.Others {
			fmt.Fprintf(&b, "\n%d %s", p.Pid, p.Command)
		}
		if o.OthersTruncated {
			b.WriteString("\n… (cut at 100)")
		}
	}
	return b.String()
}

// ModelText renders put_files' result: a line per file.
func (o *putFilesOutput) ModelText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wrote %d file(s)", len(o.Written))
	for _, w := range o.Written {
		fmt.Fprintf(&b, "\n%s  %s bytes", w.Path, groupDigits(w.Bytes))
		if w.Mode != "" {
			b.WriteString("  " + w.Mode)
		}
	}
	return b.String()
}

// ModelText renders workspace_info's result as one fact a line.
func (o *workspaceInfoOutput) ModelText() string {
	var b strings.Builder
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	line("sandbox", fmt.Sprintf("%s %s, generation %d, %s, age %d s", o.Provider, o.SandboxID, o.Generation, o.State, o.AgeSec))
	line("isolation", o.Isolation)
	line("workspace root", o.Workdir)
	line("network", o.Network.String())
	line("envd", o.EnvdVersion)
	l := o.Limits
	line("limits", fmt.Sprintf("timeout default %d s, max %d s; inline output %s bytes per stream; put_files %s bytes; read_files %s bytes per call",
		l.DefaultTimeoutSec, l.MaxTimeoutSec, groupDigits(int64(l.OutputLimitBytes)), groupDigits(l.MaxPutBytes), groupDigits(l.MaxReadBytes)))
	mode := ""
	if o.ReadOnly {
		mode = " (read-only)"
	}
	line("toolsets", strings.Join(o.Toolsets, ", ")+mode)
	if len(o.StageRoots) > 0 {
		line("stage roots", strings.Join(o.StageRoots, ", "))
	}
	if o.Artifacts {
		line("artifact store", "configured")
	}
	for _, w := range o.Warnings {
		line("warning", w)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ModelText renders workspace_reset's result.
func (o *workspaceResetOutput) ModelText() string {
	return fmt.Sprintf("new sandbox %s, generation %d (generation %d and everything in it is gone)", o.SandboxID, o.Generation, o.PreviousGeneration)
}

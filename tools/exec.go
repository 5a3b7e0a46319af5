package tools

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/invopop/jsonschema"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// maxTimeoutSec is the largest timeout_sec the schema takes (then clamped to
// the server's ceiling): anything longer is a mistake, and would overflow a
// time.Duration.
const maxTimeoutSec = 366 * 24 * 3600

// execInput is workspace_exec's arguments.
type execInput struct {
	Command    string   `json:"command,omitempty" jsonschema_description:"A shell command line, run with bash -c in the sandbox's login environment (what its login profile sets, read once per sandbox; PATH keeps the sandbox's own directories and gains the profile's; bash -lc if the profile cannot be read that way), or with sh -c where the sandbox has no bash. Pipes, redirections, && and globs work; a line of plain words with no shell syntax (ls -la src) runs directly in that same environment, as bash would run it. Give either command or argv, not both."`
	Login      bool     `json:"login,omitempty" jsonschema_description:"Run the command in a login shell (bash -lc, or sh -lc where there is no bash), which re-reads the profile on each call; by default the login environment is captured once per sandbox and each command runs with bash -c. Use it when a profile (~/.profile, ~/.bash_profile) changed since the sandbox's first command. Default false; only with command."`
	Argv       []string `json:"argv,omitempty" jsonschema:"minItems=1" jsonschema_description:"The program and its arguments, run directly without a shell (no quoting needed). argv[0] is looked up in PATH. Give either command or argv, not both."`
	Cwd        string   `json:"cwd,omitempty" jsonschema_description:"Directory this command starts in, relative to the workspace root; like a cd before the command, it then persists for the next ones. Default: where the previous command's shell ended (the workspace root at first, and after a reset). It must exist."`
	Env        []envVar `json:"env,omitempty" jsonschema_description:"Extra environment variables for this command only, as a list of {name, value} pairs (for example [{\"name\": \"DEBUG\", \"value\": \"1\"}]); they override the sandbox's variables of the same name. Each name may appear once. (A foreground command also gets SMCP_RUN_ID, its run id, which marks what it starts so that a timeout can end it all.)"`
	Stdin      *string  `json:"stdin,omitempty" jsonschema_description:"Text written to the command's standard input; the input is then closed (EOF). Without it the command reads nothing. For a background process the text is written and stdin stays open for process_input."`
	TimeoutSec *int64   `json:"timeout_sec,omitempty" jsonschema:"minimum=1" jsonschema_description:"Seconds before the command is killed (integer, at least 1). Default: the server's default timeout; values above the server's ceiling are lowered to it and the result says so. For a background process it is an optional kill deadline (none by default)."`
	Background bool     `json:"background,omitempty" jsonschema_description:"Start the command without waiting for it to end and return a process handle. The start waits briefly (wait_sec) and returns the first output, and the exit code if it already ended; a command that fails at once (exit code not 0) is an error result with its output. Its stdout and stderr go to one log; follow it with process_output, feed it with process_input, stop it with process_signal."`
	WaitSec    *int64   `json:"wait_sec,omitempty" jsonschema:"minimum=0" jsonschema_description:"Background only: seconds the start waits at most for the process's first output (returned once it pauses) or its end. Default 1; 0 returns at once."`
}

// Waits of a background start.
const (
	// defaultStartWait is how long a background start waits for first
	// output when wait_sec is not given.
	defaultStartWait = time.Second
	// maxStartWaitSec bounds a background start's wait_sec.
	maxStartWaitSec = 30
	// startOutputBytes bounds the first output a background start returns.
	startOutputBytes = 16 << 10
)

// runMarkerVar is set in the environment of every foreground command to its
// run id, so the processes a command leaves behind (detached with setsid,
// nohup or a double fork, out of reach of its process group) can be found
// when it times out. A process that clears its environment escapes it.
const runMarkerVar = "SMCP_RUN_ID"

// envVar is one environment variable of workspace_exec's env. env is a list
// of these rather than a JSON object keyed by name because an object with
// arbitrary keys (additionalProperties) is what OpenAI's strict mode and
// Gemini's function schemas reject.
type envVar struct {
	Name  string `json:"name" jsonschema:"required,minLength=1" jsonschema_description:"The variable's name: non-empty, without = or NUL."`
	Value string `json:"value" jsonschema:"required" jsonschema_description:"The variable's value (may be empty; no NUL)."`
}

// JSONSchemaExtend publishes the limits checkExec relies on.
func (execInput) JSONSchemaExtend(s *jsonschema.Schema) {
	schemaProp(s, "timeout_sec").Maximum = schemaInt(maxTimeoutSec)
	schemaProp(s, "wait_sec").Maximum = schemaInt(maxStartWaitSec)
}

// withoutBackgroundOutput removes the background-only fields from
// workspace_exec's output schema (see withoutBackground).
func withoutBackgroundOutput(s *jsonschema.Schema) {
	for _, name := range []string{"process", "pid", "status", "output", "output_next_offset", "output_total_bytes"} {
		s.Properties.Delete(name)
	}
	schemaProp(s, "full_output").Properties.Delete("output")
}

// withoutBackground removes what workspace_exec's schema offers for
// background processes, for a server without the process toolset (nothing
// could follow, feed or stop them).
func withoutBackground(s *jsonschema.Schema) {
	s.Properties.Delete("background")
	s.Properties.Delete("wait_sec")
	for _, name := range []string{"stdin", "timeout_sec"} {
		p := schemaProp(s, name)
		p.Description, _, _ = strings.Cut(p.Description, " For a background process")
	}
}

// fullOutput names the log files a run wrote, relative to the workspace.
type fullOutput struct {
	Stdout string `json:"stdout,omitempty" jsonschema_description:"Log with the complete standard output (present when there was any and it was saved). Read it with read_files using offset/limit."`
	Stderr string `json:"stderr,omitempty" jsonschema_description:"Log with the complete standard error (present when there was any and it was saved)."`
	Output string `json:"output,omitempty" jsonschema_description:"Background process only: the log that receives its stdout and stderr interleaved; process_output reads it."`
}

// execOutput is workspace_exec's result.
type execOutput struct {
	Meta
	RunID            string      `json:"run_id" jsonschema:"required" jsonschema_description:"This run's id (g<generation>-r<n>); its logs live under .sandbox-mcp/runs/<run_id>/."`
	ExitCode         *int        `json:"exit_code,omitempty" jsonschema_description:"Exit status of a finished command. Non-zero is a normal result, not a tool error; a death by signal is 128 + the signal number (137 for KILL)."`
	Signal           string      `json:"signal,omitempty" jsonschema_description:"The signal that ended the command, when one did (killed, terminated, …)."`
	TimedOut         bool        `json:"timed_out" jsonschema_description:"True when the command was killed because it reached its timeout."`
	Stdout           *string     `json:"stdout,omitempty" jsonschema_description:"Standard output, inline: all of it, or the first and last part around a marker line that says how many bytes were cut and where the full log is."`
	Stderr           *string     `json:"stderr,omitempty" jsonschema_description:"Standard error, inline, like stdout."`
	StdoutTruncated  bool        `json:"stdout_truncated" jsonschema_description:"True when stdout was longer than the inline limit and its middle was cut."`
	StderrTruncated  bool        `json:"stderr_truncated" jsonschema_description:"True when stderr was longer than the inline limit and its middle was cut."`
	StdoutTotalBytes *int64      `json:"stdout_total_bytes,omitempty" jsonschema_description:"Exact size of the whole stdout in bytes."`
	StderrTotalBytes *int64      `json:"stderr_total_bytes,omitempty" jsonschema_description:"Exact size of the whole stderr in bytes."`
	StdoutInvalid    bool        `json:"stdout_invalid_utf8,omitempty" jsonschema_description:"True when stdout had bytes that are not UTF-8; they are shown as U+FFFD and the log keeps the exact bytes."`
	StderrInvalid    bool        `json:"stderr_invalid_utf8,omitempty" jsonschema_description:"True when stderr had bytes that are not UTF-8; they are shown as U+FFFD and the log keeps the exact bytes."`
	DurationMs       int64       `json:"duration_ms" jsonschema_description:"Wall time of the command in milliseconds (for a background start: the time to start it)."`
	FullOutput       *fullOutput `json:"full_output,omitempty" jsonschema_description:"Workspace-relative paths of the log files holding the complete output; only logs that were written are listed."`
	Process          string      `json:"process,omitempty" jsonschema_description:"Background only: the process handle (g<generation>-p<pid>) for process_output, process_input, process_signal."`
	Status           string      `json:"status,omitempty" jsonschema:"enum=running,enum=exited,enum=killed,enum=unknown" jsonschema_description:"Background only: the process's status when the start returned (running, or exited or killed when it ended within wait_sec)."`
	Output           *string     `json:"output,omitempty" jsonschema_description:"Background only: the output (stdout and stderr interleaved) the process wrote within wait_sec, from the start of its log."`
	OutputNext       *int64      `json:"output_next_offset,omitempty" jsonschema_description:"Background only: the log offset after output; pass it to process_output as offset to read on."`
	OutputTotal      *int64      `json:"output_total_bytes,omitempty" jsonschema_description:"Background only: the log's size when the start returned (more than output_next_offset when output was cut)."`
	Pid              uint32      `json:"pid,omitempty" jsonschema_description:"Background only: the process id inside the sandbox."`
	TimeoutSec       int64       `json:"timeout_sec,omitempty" jsonschema_description:"The timeout in effect, in seconds, after clamping (absent for a background process without a deadline)."`
	Cwd              string      `json:"cwd,omitempty" jsonschema_description:"The shell's working directory when the command ended (where it started, for argv, a background process or a command killed before it finished), relative to the workspace root (. for the root). The next command starts there."`
	TimeoutClamped   bool        `json:"timeout_clamped" jsonschema_description:"True when the timeout_sec asked for was above the server's ceiling and was lowered to it."`
}

// WorkspaceExec is the workspace_exec tool: it runs a command in the
// workspace and waits for it (or starts it in the background).
func WorkspaceExec(d *Deps) Tool {
	logs := "saved whole in a log under .sandbox-mcp/runs/"
	if d.Config.hasToolset(ToolsetFiles) {
		logs += " that read_files can page through"
	}
	long := "Commands are killed at timeout_sec (the server clamps it to its ceiling), with whatever they left running; for servers, watchers or anything long, set background: true: the start returns the first output and a handle to follow with process_output."
	var edit, editOut func(*jsonschema.Schema)
	if !d.Config.hasToolset(ToolsetProcess) {
		editOut = withoutBackgroundOutput
		long = "Commands are killed at timeout_sec (the server clamps it to its ceiling), with whatever they left running; on this server no command outlives its call, so give anything long a timeout_sec to match."
		edit = withoutBackground
	}
	return define(d, spec[execInput, execOutput]{
		name:  "workspace_exec",
		title: "Run a command in the workspace",
		description: "Run a shell command (bash -c, in the sandbox's login environment) or an argv in the sandbox's workspace and wait for it; returns exit_code, stdout, stderr and timing. " +
			"A non-zero exit code is a normal result, not a failure of the tool. " +
			"The working directory persists between calls: a cd carries over to the next command and each result shows the cwd; nothing else does: every command is a fresh shell, so exported variables, aliases and functions are gone next time (set them in the same command, or use env). Each stream is shown inline up to the server's limit (first and last part, with a marker) and " + logs + ". " +
			long,
		inputSchema:  edit,
		outputSchema: editOut,
		toolset:      ToolsetExec,
		annotations: Annotations{
			ReadOnly:    false,
			Destructive: true, // an arbitrary command can delete or overwrite anything in the sandbox
			Idempotent:  false,
			OpenWorld:   !d.Config.Network.IsOff(),
		},
		run: runExec,
	})
}

// execPlan is a checked workspace_exec request.
type execPlan struct {
	in       *execInput
	timeout  time.Duration // 0: none (background without timeout_sec)
	asked    time.Duration
	clamped  bool
	describe string // the command as process_list shows it
	env      map[string]string
}

// envMap checks workspace_exec's env list and returns it as a map (nil when
// empty). A name given twice is an input error rather than last-wins: two
// values for one variable in one call are most likely a mistake.
func envMap(vars []envVar) (map[string]string, error) {
	if len(vars) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(vars))
	first := make(map[string]int, len(vars))
	for i, v := range vars {
		field := fmt.Sprintf("env[%d]", i)
		if v.Name == "" || strings.ContainsAny(v.Name, "=\x00") {
			return nil, inputErr(field+".name", "%q is not a valid variable name (it must be non-empty and contain neither = nor NUL)", v.Name)
		}
		if strings.IndexByte(v.Value, 0) >= 0 {
			return nil, inputErr(field+".value", "contains a NUL byte")
		}
		if j, dup := first[v.Name]; dup {
			return nil, inputErr(field+".name", "%q is already set by env[%d]: give each variable once", v.Name, j)
		}
		first[v.Name] = i
		env[v.Name] = v.Value
	}
	return env, nil
}

// checkExec validates the arguments that need no sandbox, so a bad call
// fails before one is created.
func checkExec(d *Deps, in *execInput) (*execPlan, error) {
	p := &execPlan{in: in}
	// The schema checks argv's length and timeout_sec's range.
	switch {
	case in.Command != "" && len(in.Argv) > 0:
		return nil, inputErr("command", "give either command (a shell string) or argv (an array), not both")
	case in.Command == "" && len(in.Argv) == 0:
		return nil, inputErr("command", "missing: give command (a shell string) or argv (an array)")
	}
	if strings.TrimSpace(in.Command) == "" && in.Command != "" {
		return nil, inputErr("command", "is blank")
	}
	if strings.IndexByte(in.Command, 0) >= 0 {
		return nil, inputErr("command", "contains a NUL byte")
	}
	if in.Login && in.Command == "" {
		return nil, inputErr("login", "applies only to command: argv runs without a shell")
	}
	if len(in.Argv) > 0 && in.Argv[0] == "" {
		return nil, inputErr("argv[0]", "is empty: it must name the program to run")
	}
	for i, a := range in.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, inputErr(fmt.Sprintf("argv[%d]", i), "contains a NUL byte")
		}
	}
	env, err := envMap(in.Env)
	if err != nil {
		return nil, err
	}
	p.env = env
	switch {
	case in.TimeoutSec != nil:
		p.timeout = time.Duration(*in.TimeoutSec) * time.Second
		if p.timeout > d.Config.MaxTimeout {
			p.asked, p.timeout, p.clamped = p.timeout, d.Config.MaxTimeout, true
		}
	case !in.Background:
		p.timeout = d.Config.DefaultTimeout
	}
	if in.Background && !d.Config.hasToolset(ToolsetProcess) {
		return nil, inputErr("background", "this server does not offer background processes (the process toolset is not enabled), so nothing could follow or stop one; run the command in the foreground with a timeout_sec long enough")
	}
	if in.WaitSec != nil && !in.Background {
		return nil, inputErr("wait_sec", "applies only to background: true (a foreground command is waited for up to timeout_sec)")
	}
	if in.Command != "" {
		p.describe = in.Command
	} else {
		p.describe = shellQuoteArgs(in.Argv)
	}
	return p, nil
}

// shellQuoteArgs renders argv as a shell would need it, for display.
func shellQuoteArgs(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			safe := r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ':' || r == ',' || r == '+' || r == '@' ||
				r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
			return !safe
		}) < 0 {
			parts[i] = a
			continue
		}
		parts[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(parts, " ")
}

func runExec(ctx context.Context, c *Call, in *execInput) (*execOutput, error) {
	plan, err := checkExec(c.d, in)
	if err != nil {
		return nil, err
	}
	lease, err := c.Sandbox(ctx)
	if err != nil {
		return nil, err
	}
	r := newPathResolver(c, lease.Sandbox.Workdir, lease.Client)
	var cwd string
	if in.Cwd != "" {
		res, err := r.resolve(ctx, "cwd", in.Cwd)
		switch {
		case err != nil:
			return nil, err
		case !res.exists:
			return nil, inputErr("cwd", "directory %q does not exist in the workspace", in.Cwd)
		case res.entry.Type != envdclient.TypeDir:
			return nil, inputErr("cwd", "%q is a %s, not a directory", in.Cwd, res.entry.Type)
		}
		// The path as given (a link stays a link in pwd); envd follows it.
		cwd = res.abs
	} else if cwd, err = startDir(ctx, c, r, lease.Generation); err != nil {
		return nil, err
	}
	// A foreground command string reports where its shell ended (see
	// shellcwd.go).
	var claim *runClaim
	line, cwdFile := in.Command, ""
	if !in.Background {
		claim = newRunClaim(c.d, c.ws.Key, lease.Generation, r.root, lease.Client)
		if in.Command != "" {
			cwdFile = path.Join(r.root, cwdDir, claim.ID()+"-"+randomHex(6))
			line = cwdTrap(cwdFile, cwd, in.Command)
		}
	}
	cmd := envdclient.Command{Env: plan.env, Cwd: cwd, Timeout: plan.timeout}
	if in.Command != "" {
		prof, err := c.d.shell.profileFor(ctx, c, lease)
		if err != nil {
			return nil, err
		}
		cmd.Cmd, cmd.Args, cmd.Env = prof.command(line, in.Login, plan.env)
	} else {
		cmd.Cmd, cmd.Args = in.Argv[0], in.Argv[1:]
	}
	if claim != nil {
		cmd.Env = withVar(cmd.Env, runMarkerVar, claim.ID())
	}
	out := &execOutput{}
	if plan.timeout > 0 {
		out.TimeoutSec = int64(plan.timeout / time.Second)
	}
	if plan.clamped {
		out.TimeoutClamped = true
		c.Notice("%s", clampNotice(plan.asked, c.d.Config.MaxTimeout, c.d.Config.hasToolset(ToolsetProcess)))
	}
	if in.Background {
		out.Cwd = r.rel(cwd)
		return startBackground(ctx, c, lease, r, cmd, plan, out)
	}
	// A plain command line runs without the shell (see plainWords); the
	// shell after all when its first word is no executable in PATH (envd's
	// NotFound at start, before any process existed). The shell's run keeps
	// the run id: the direct start wrote nothing under it.
	if words, plain := plainWords(in.Command); plain && !in.Login && cmd.Args[0] == "-c" {
		direct := cmd
		direct.Cmd, direct.Args = words[0], words[1:]
		res, err := runForeground(ctx, c, lease, r, claim, direct, plan, out)
		if err == nil {
			recordShellDir(c, r, lease.Generation, cwd, "", res)
		}
		if err == nil || !envdclient.IsNotFound(err) {
			return res, err
		}
	}
	res, err := runForeground(ctx, c, lease, r, claim, cmd, plan, out)
	if err != nil {
		return nil, err
	}
	ended := ""
	if cwdFile != "" {
		ended = readShellDir(ctx, lease.Client, cwdFile)
	}
	recordShellDir(c, r, lease.Generation, cwd, ended, res)
	return res, nil
}

// runForeground runs cmd under claim's run id, streaming each output stream
// into its log while keeping only head and tail in memory, and shapes the
// result.
func runForeground(ctx context.Context, c *Call, lease *manage.Lease, r *pathResolver, claim *runClaim, cmd envdclient.Command, plan *execPlan, out *execOutput) (*execOutput, error) {
	cmd.Tag = newProcessTag(tagFg, claim.ID())
	if plan.in.Stdin != nil {
		cmd.Stdin = strings.NewReader(*plan.in.Stdin)
	}
	logs := [2]*streamLog{
		newStreamLog(ctx, lease.Client, claim, stdoutLogName),
		newStreamLog(ctx, lease.Client, claim, stderrLogName),
	}
	opts := envdclient.RunOptions{
		StdoutLimit: c.d.Config.OutputLimit,
		StderrLimit: c.d.Config.OutputLimit,
		Stdout:      logs[0],
		Stderr:      logs[1],
	}
	stopProgress := startProgress(ctx, c, &opts)
	res, runErr := lease.Client.Run(ctx, cmd, opts)
	stopProgress()
	var logPaths [2]string
	var logErrs [2]error
	for i, l := range logs {
		logPaths[i], logErrs[i] = l.finish()
	}
	if runErr != nil {
		return nil, c.Check(runErr)
	}
	out.RunID = claim.ID()
	code := res.ExitCode
	out.ExitCode = &code
	out.Signal = res.Signal
	out.TimedOut = res.TimedOut
	out.DurationMs = res.Duration.Milliseconds()
	showStreams(c, r, res, logPaths, logErrs, out)
	networkNotice(c, lease.Sandbox, out.Stdout, out.Stderr)
	if res.TimedOut {
		timeoutNotices(ctx, c, lease, claim.ID(), plan.timeout)
	}
	return out, nil
}

// withVar returns env (not changed) with name set to value.
func withVar(env map[string]string, name, value string) map[string]string {
	out := make(map[string]string, len(env)+1)
	for k, v := range env {
		out[k] = v
	}
	out[name] = value
	return out
}

// timeoutNotices explains a foreground command's timeout: how to run it
// instead, and which processes it left behind (detached from its process
// group, which envd killed), which are killed too: a foreground command is
// over once it timed out, and what it started would otherwise keep running
// unseen, with no handle to follow or stop it.
func timeoutNotices(ctx context.Context, c *Call, lease *manage.Lease, runID string, timeout time.Duration) {
	hint := fmt.Sprintf("raise timeout_sec (the server's ceiling is %d s) if it needs longer", int64(c.d.Config.MaxTimeout/time.Second))
	if c.d.Config.hasToolset(ToolsetProcess) {
		hint = "for a server, a watcher or anything long, run it with background: true: the start returns its first output and a handle, and process_output follows it"
	}
	c.Notice("The command did not finish within its timeout of %d s and was killed; %s.", int64(timeout/time.Second), hint)
	n, left, err := killLeftovers(ctx, lease.Client, runID)
	switch {
	case err != nil:
		c.d.Logger.Warn("looking for processes a timed-out command left", "run", runID, "err", err)
	case n > len(left):
		c.Notice("The command had left %d processes running outside its process group (setsid, nohup or a daemon); they were killed as well, among them: %s.", n, strings.Join(left, "; "))
	case n > 0:
		c.Notice("The command had left %d process(es) running outside its process group (setsid, nohup or a daemon); they were killed as well: %s.", n, strings.Join(left, "; "))
	}
}

// leftoverScript kills every process whose environment carries the run
// marker ($1 is NAME=VALUE), prints the pid and command line of the first
// 10, then how many it killed. It is POSIX sh over /proc, so it runs in any
// Linux sandbox.
const leftoverScript = `m=$1; n=0
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$$" ] && continue
  if tr '\000' '\n' <"$d/environ" 2>/dev/null | grep -qxF -e "$m"; then
    c=$(tr '\000' ' ' <"$d/cmdline" 2>/dev/null | cut -c1-120)
    if kill -9 "$p" 2>/dev/null; then
      n=$((n+1)); [ "$n" -le 10 ] && printf '%s %s\n' "$p" "$c"
    fi
  fi
done; echo "$n"`

// killLeftovers kills the processes of run runID that outlived it (see
// runMarkerVar); it returns how many and describes the first ones ("pid
// command").
func killLeftovers(ctx context.Context, cli *envdclient.Client, runID string) (int, []string, error) {
	res, err := cli.Run(ctx, envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", leftoverScript, "sh", runMarkerVar + "=" + runID}, Timeout: 30 * time.Second},
		envdclient.RunOptions{StdoutLimit: 8 << 10, StderrLimit: 1 << 10})
	if err != nil {
		return 0, nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(res.Stdout.Bytes())), "\n")
	n, err := strconv.Atoi(lines[len(lines)-1])
	if err != nil || res.ExitCode != 0 {
		return 0, nil, fmt.Errorf("the scan exited with status %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr.Bytes())))
	}
	return n, lines[:len(lines)-1], nil
}

// startProgress makes a run report progress while it goes, when the client
// asked for progress (only then is the output metered): opts' writers are
// wrapped in a meter. The function it returns stops the reports.
func startProgress(ctx context.Context, c *Call, opts *envdclient.RunOptions) (stop func()) {
	if c.progressToken() == nil {
		return func() {}
	}
	meter := &outputMeter{}
	opts.Stdout, opts.Stderr = meter.tee(0, opts.Stdout), meter.tee(1, opts.Stderr)
	stopc, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		progressLoop(ctx, c, c.d.Config.ProgressInterval, meter, stopc)
	}()
	return func() { close(stopc); <-done }
}

// showStreams puts a finished run's stdout and stderr into out: inline
// text, sizes and the logs that hold them whole (logPaths, absolute; an
// error in logErrs when a log is incomplete), with the notices they need.
func showStreams(c *Call, r *pathResolver, res *envdclient.Result, logPaths [2]string, logErrs [2]error, out *execOutput) {
	streams := [2]struct {
		name string
		data envdclient.Output
	}{{"stdout", res.Stdout}, {"stderr", res.Stderr}}
	full := &fullOutput{}
	for i, s := range streams {
		rel := ""
		if logPaths[i] != "" {
			rel = r.rel(logPaths[i])
		}
		if logErrs[i] != nil {
			c.Notice("%s", logIncompleteNotice(s.name, logErrs[i]))
		}
		text := renderInline(s.data, s.name, rel)
		total := s.data.Total
		if text.Truncated {
			c.Notice("%s", truncatedNotice(s.name, total, text.HeadBytes, text.TailBytes, rel))
		}
		if text.InvalidUTF8 {
			c.Notice("%s", invalidUTF8Notice(s.name, rel))
		}
		if i == 0 {
			out.Stdout, out.StdoutTruncated, out.StdoutTotalBytes, out.StdoutInvalid = &text.Text, text.Truncated, &total, text.InvalidUTF8
			full.Stdout = rel
		} else {
			out.Stderr, out.StderrTruncated, out.StderrTotalBytes, out.StderrInvalid = &text.Text, text.Truncated, &total, text.InvalidUTF8
			full.Stderr = rel
		}
	}
	if full.Stdout != "" || full.Stderr != "" {
		out.FullOutput = full
	}
}

// backgroundScript runs the user's command with stdout and stderr appended
// to the log ($1), after leaving a symlink named after the process handle
// ($2 followed by the pid) that points at the run directory ($3). exec keeps
// the pid, so the handle's pid is the user command's. The shell variables
// are not exported: the command's environment is untouched.
const backgroundScript = `ln -s "$3" "$2$$" 2>/dev/null; l=$1; shift 3; exec "$@" >>"$l" 2>&1`

// startBackground starts cmd detached from the call, its output going to
// one log, registers it, and returns its handle.
func startBackground(ctx context.Context, c *Call, lease *manage.Lease, r *pathResolver, cmd envdclient.Command, plan *execPlan, out *execOutput) (*execOutput, error) {
	started := time.Now()
	claim := newRunClaim(c.d, c.ws.Key, lease.Generation, r.root, lease.Client)
	dir, err := claim.claim(ctx)
	if err != nil {
		return nil, c.Check(err)
	}
	runID := claim.ID()
	logAbs := path.Join(dir, outputLogName)
	linkPrefix := path.Join(r.root, runsDir, fmt.Sprintf("g%d-p", lease.Generation))
	user := append([]string{cmd.Cmd}, cmd.Args...)
	cmd.Cmd = "/bin/sh"
	cmd.Args = append([]string{"-c", backgroundScript, "sh", logAbs, linkPrefix, runID}, user...)
	cmd.Tag = newProcessTag(tagBg, runID)
	h, err := lease.Client.Start(ctx, cmd, envdclient.StartOptions{Stdin: true, StdoutLimit: -1, StderrLimit: -1})
	if err != nil {
		return nil, c.Check(err)
	}
	e := newProcEntry(r.root, lease.Generation, h.Pid(), runID)
	e.command, e.startedAt, e.timeout = plan.describe, started, plan.timeout
	c.d.procs.add(c.ws.Key, e, h)
	if plan.in.Stdin != nil && *plan.in.Stdin != "" {
		if _, err := sendInput(ctx, lease.Client, h.Pid(), []byte(*plan.in.Stdin)); err != nil {
			if le, ok := manage.AsLost(c.Check(err)); ok {
				return nil, le
			}
			c.Notice("The process started, but its stdin could not be written (%s); use process_input to try again.", rootCause(err))
		}
	}
	out.RunID = runID
	out.Process = e.handle
	out.Pid = e.pid
	out.FullOutput = &fullOutput{Output: e.logRel}
	wait := defaultStartWait
	if plan.in.WaitSec != nil {
		wait = time.Duration(*plan.in.WaitSec) * time.Second
	}
	page := func() (logPage, error) {
		end, ended := e.state()
		p, err := readLog(ctx, lease.Client, e.logAbs, 0, startOutputBytes)
		p.end, p.ended = end, ended
		return p, err
	}
	var p logPage
	if wait > 0 {
		p, err = waitForOutput(ctx, c, lease.Client, e, wait, c.d.Config.OutputSettle, startOutputBytes, page)
	} else {
		p, err = page()
	}
	if err != nil {
		return nil, c.Check(err)
	}
	out.DurationMs = time.Since(started).Milliseconds()
	n := len(p.data)
	if !p.ended || int64(n) < p.size {
		n = cutAtRune(p.data)
	}
	text, bad := validText(p.data[:n])
	next, total := int64(n), p.size
	out.Output, out.OutputNext, out.OutputTotal = &text, &next, &total
	if bad {
		c.Notice("%s", invalidUTF8Notice("The output", e.logRel))
	}
	st := statusOf(p.end)
	out.Status, out.ExitCode, out.Signal, out.TimedOut = st.Status, st.ExitCode, st.Signal, st.TimedOut
	if p.ended && (st.Signal != "" || st.ExitCode != nil && *st.ExitCode != 0) {
		// It failed before the start returned (a mistyped command, a
		// missing file, a port in use): that is the answer to the start.
		return nil, &resultError{text: out.ModelText()}
	}
	return out, nil
}

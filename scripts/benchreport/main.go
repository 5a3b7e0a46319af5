// Command benchreport turns the output of `go test -bench` (several
// packages, -count N) into the benchmark report: medians of every metric,
// ratios against baselines measured in the same run, whether each goal was
// met, and the machine they ran on. scripts/bench runs it; its output is
// docs/benchmarks.md.
//
//	go run ./scripts/benchreport [-raw FILE] < bench.txt > docs/benchmarks.md
//
// Everything comes from the input: the runs per benchmark are counted, and
// the machine is described by the configuration lines scripts/bench writes
// into it at run time ("date: …", "kernel: …", "load-start: …", …; the
// format's own "key: value" lines, which `go test` writes too: "cpu: …").
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// results maps "pkg.BenchmarkName" → metric unit → values, one per run.
type results map[string]map[string][]float64

// benchLine is one result line of the input.
type benchLine struct {
	pkg, name string
	fields    []string // after the name: iterations, then value unit pairs
}

// configLine is a "key: value" line of the benchmark format.
var configLine = regexp.MustCompile(`^([a-z][a-zA-Z0-9_-]*): (.*)$`)

// parse reads go test -bench output: the results, and the configuration
// lines (first value of each key).
func parse(r io.Reader) (results, map[string]string, error) {
	config := map[string]string{}
	var lines []benchLine
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := configLine.FindStringSubmatch(line); m != nil {
			if m[1] == "pkg" {
				pkg = strings.TrimPrefix(strings.TrimPrefix(m[2], "github.com/sandbox-mcp/sandbox-mcp"), "/")
				if pkg == "" {
					pkg = "main"
				}
			} else if _, seen := config[m[1]]; !seen {
				config[m[1]] = strings.TrimSpace(m[2])
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		lines = append(lines, benchLine{pkg: pkg, name: f[0], fields: f[1:]})
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	suffix := procsSuffix(lines)
	res := results{}
	for _, l := range lines {
		key := l.pkg + "." + strings.TrimSuffix(l.name, suffix)
		if res[key] == nil {
			res[key] = map[string][]float64{}
		}
		// fields[0] is the iteration count; then value unit pairs.
		for i := 1; i+1 < len(l.fields); i += 2 {
			v, err := strconv.ParseFloat(l.fields[i], 64)
			if err != nil {
				continue
			}
			res[key][l.fields[i+1]] = append(res[key][l.fields[i+1]], v)
		}
	}
	return res, config, nil
}

var trailingNumber = regexp.MustCompile(`-[0-9]+$`)

// procsSuffix is the GOMAXPROCS suffix ("-2") go test appended to every
// benchmark name of the run, or "" when it appended none (GOMAXPROCS 1):
// the "-N" that all names end with, else nothing. A name's own trailing
// number ("…/2025-11-25") is never taken for one.
func procsSuffix(lines []benchLine) string {
	suffix := ""
	for i, l := range lines {
		s := trailingNumber.FindString(l.name)
		if s == "" || (i > 0 && s != suffix) {
			return ""
		}
		suffix = s
	}
	return suffix
}

func median(vs []float64) (float64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// runs describes how many runs each median is of: "5", or "3–5" when
// metrics have different numbers of values.
func (r results) runs() string {
	lo, hi := 0, 0
	for _, units := range r {
		for _, vs := range units {
			if lo == 0 || len(vs) < lo {
				lo = len(vs)
			}
			hi = max(hi, len(vs))
		}
	}
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

// metric names one measured number.
type metric struct {
	bench string // "pkg.BenchmarkName" or "pkg.BenchmarkName/sub"
	unit  string // "p50-µs", "ns/op", "MB/s", …
}

func (r results) get(m metric) (float64, bool) {
	return median(r[m.bench][m.unit])
}

// row is one line of the report: a measurement, optionally against a
// baseline of the same run, with the goal the issue set.
type row struct {
	what     string
	m        metric
	base     *metric
	baseWhat string
	goal     string
}

func isDuration(unit string) bool { return unit == "ns/op" || strings.HasSuffix(unit, "-µs") }

// ms converts a duration metric to milliseconds.
func ms(v float64, unit string) float64 {
	if unit == "ns/op" {
		return v / 1e6
	}
	return v / 1e3
}

func fmtValue(v float64, unit string) string {
	switch {
	case isDuration(unit):
		return fmtDuration(time.Duration(ms(v, unit) * float64(time.Millisecond)))
	case unit == "MB/s":
		return fmt.Sprintf("%.0f MB/s", v)
	case strings.Contains(unit, "MiB"):
		return fmt.Sprintf("%.1f MiB", v)
	}
	return fmt.Sprintf("%.3g %s", v, unit)
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d >= 10*time.Microsecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	default:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	}
}

// The goals benchreport can check; any other goal is shown, not judged.
var (
	ratioGoal      = regexp.MustCompile(`^ratio ≤ ([0-9.]+)$`)
	percentileGoal = regexp.MustCompile(`^p99 ≤ ([0-9.]+) ?× ?p50$`)
	atMostMsGoal   = regexp.MustCompile(`^≤ ([0-9.]+) ms( median)?$`)
	atLeastGoal    = regexp.MustCompile(`^≥ ([0-9.]+) MB/s$`)
)

// goalMet checks goal against a row's value (in unit) and its ratio to the
// baseline (0 without one). ok is false for a goal it cannot judge.
func goalMet(goal string, v float64, unit string, ratio float64, hasRatio bool) (met, ok bool) {
	met, ok = goalCheck(goal, v, unit, ratio, hasRatio)
	return met && ok, ok
}

func goalCheck(goal string, v float64, unit string, ratio float64, hasRatio bool) (met, ok bool) {
	num := func(s string) float64 {
		f, _ := strconv.ParseFloat(s, 64)
		return f
	}
	switch {
	case goal == "0":
		return v == 0, true
	case ratioGoal.MatchString(goal):
		return ratio <= num(ratioGoal.FindStringSubmatch(goal)[1]), hasRatio
	case percentileGoal.MatchString(goal):
		return ratio <= num(percentileGoal.FindStringSubmatch(goal)[1]), hasRatio
	case atMostMsGoal.MatchString(goal):
		return ms(v, unit) <= num(atMostMsGoal.FindStringSubmatch(goal)[1]), isDuration(unit)
	case atLeastGoal.MatchString(goal):
		return v >= num(atLeastGoal.FindStringSubmatch(goal)[1]), unit == "MB/s"
	}
	return false, false
}

func rows() []row {
	m := func(bench, unit string) metric { return metric{bench, unit} }
	p := func(bench, unit string) *metric { return &metric{bench, unit} }
	return []row{
		{what: "`true` via envd client `Run` (unix socket, daemon process), p50", m: m("envd/envdclient.BenchmarkRunTrue", "p50-µs"), base: p("envd/envdclient.BenchmarkExecTrue", "p50-µs"), baseWhat: "os/exec `true`", goal: "ratio ≤ 2"},
		{what: "`true` via envd client `Run`, p99", m: m("envd/envdclient.BenchmarkRunTrue", "p99-µs"), base: p("envd/envdclient.BenchmarkExecTrue", "p99-µs"), baseWhat: "os/exec `true`, p99"},
		{what: "workspace_exec `true`, built binary over stdio (bwrap sandbox), p50", m: m("main.BenchmarkStdioBinaryExecTrue", "p50-µs"), base: p("envd/envdclient.BenchmarkExecTrue", "p50-µs"), baseWhat: "os/exec `true`"},
		{what: "workspace_exec `true`, built binary over stdio, p99", m: m("main.BenchmarkStdioBinaryExecTrue", "p99-µs"), base: p("envd/envdclient.BenchmarkExecTrue", "p99-µs"), baseWhat: "os/exec `true`, p99"},
		{what: "workspace_exec argv `true`, in-process MCP client (tools layer), mean", m: m("tools.BenchmarkWorkspaceExecTrue/argv", "ns/op"), base: p("tools.BenchmarkEnvdRunTrue", "ns/op"), baseWhat: "envd client `Run` alone, same kind of sandbox, mean", goal: "ratio ≤ 1.5"},
		{what: "workspace_exec command `true` (bash -c, login environment captured once), in-process MCP client, mean", m: m("tools.BenchmarkWorkspaceExecTrue/command", "ns/op"), base: p("tools.BenchmarkWorkspaceExecTrue/argv", "ns/op"), baseWhat: "the same with argv `true`", goal: "ratio ≤ 1.3"},
		{what: "workspace_exec command `true` with login: true (bash -lc), in-process MCP client, mean", m: m("tools.BenchmarkWorkspaceExecTrue/login", "ns/op"), base: p("tools.BenchmarkWorkspaceExecTrue/argv", "ns/op"), baseWhat: "the same with argv `true`"},
		{what: "workspace_exec `true` over stdio (server, in-process pipes), p50", m: m("server.BenchmarkStdioExecTrue", "p50-µs"), base: p("server.BenchmarkEnvdRunTrue", "p50-µs"), baseWhat: "envd client `Run` alone, same sandbox kind (managetest)", goal: "ratio ≤ 1.5"},
		{what: "workspace_exec `true` over HTTP (2025-11-25 session), p50", m: m("server.BenchmarkHTTPExecTrue/2025-11-25", "p50-µs"), base: p("server.BenchmarkEnvdRunTrue", "p50-µs"), baseWhat: "envd client `Run` alone (managetest)"},
		{what: "workspace_exec `true` over HTTP (2026-07-28 stateless), p50", m: m("server.BenchmarkHTTPExecTrue/2026-07-28", "p50-µs"), base: p("server.BenchmarkEnvdRunTrue", "p50-µs"), baseWhat: "envd client `Run` alone (managetest)"},
		{what: "32 HTTP sessions × 50 workspace_exec calls, p50", m: m("server.BenchmarkConcurrentSessions/exec", "p50-µs")},
		{what: "32 HTTP sessions × 50 workspace_exec calls, p99", m: m("server.BenchmarkConcurrentSessions/exec", "p99-µs"), base: p("server.BenchmarkConcurrentSessions/exec", "p50-µs"), baseWhat: "its own p50", goal: "p99 ≤ 10 × p50"},
		{what: "32 HTTP sessions × 50 workspace_exec calls, failed calls", m: m("server.BenchmarkConcurrentSessions/exec", "errors"), goal: "0"},
		{what: "32 HTTP sessions × 50 no-process calls, p99", m: m("server.BenchmarkConcurrentSessions/noop", "p99-µs"), base: p("server.BenchmarkConcurrentSessions/noop", "p50-µs"), baseWhat: "its own p50"},
		{what: "cold local sandbox create → first `true` (bwrap), p50", m: m("manage/local.BenchmarkCreateToFirstRun/bwrap", "p50-µs"), base: p("manage/local.BenchmarkBwrapTrue", "p50-µs"), baseWhat: "`bwrap … /bin/true`", goal: "≤ 50 ms median"},
		{what: "cold local sandbox create → first `true` (bwrap, lean envd), p50, against bwrap", m: m("manage/local.BenchmarkCreateToFirstRun/bwrap", "p50-µs"), base: p("manage/local.BenchmarkBwrapTrue", "p50-µs"), baseWhat: "`bwrap … /bin/true`", goal: "ratio ≤ 3"},
		{what: "cold local sandbox create → first `true` (bwrap, lean envd), p50, against the full binary", m: m("manage/local.BenchmarkCreateToFirstRun/bwrap", "p50-µs"), base: p("manage/local.BenchmarkCreateToFirstRun/bwrap-full", "p50-µs"), baseWhat: "the same running `sandbox-mcp envd` (no embedded envd)"},
		{what: "cold local sandbox create → first `true` (bwrap, `sandbox-mcp envd`), p50", m: m("manage/local.BenchmarkCreateToFirstRun/bwrap-full", "p50-µs"), base: p("manage/local.BenchmarkBwrapTrue", "p50-µs"), baseWhat: "`bwrap … /bin/true`"},
		{what: "cold local sandbox create → first `true` (bwrap), p99", m: m("manage/local.BenchmarkCreateToFirstRun/bwrap", "p99-µs"), base: p("manage/local.BenchmarkBwrapTrue", "p99-µs"), baseWhat: "`bwrap … /bin/true`, p99"},
		{what: "cold local sandbox create → first `true` (none), p50", m: m("manage/local.BenchmarkCreateToFirstRun/none", "p50-µs"), base: p("manage/local.BenchmarkExecTrue", "p50-µs"), baseWhat: "os/exec `true`"},
		{what: "envd spawn → ready line, lean sandbox-envd, p50", m: m("envd/cmd/sandbox-envd.BenchmarkSpawnReady/lean", "p50-µs"), base: p("envd/cmd/sandbox-envd.BenchmarkSpawnReady/full", "p50-µs"), baseWhat: "`sandbox-mcp envd` (full binary)", goal: "≤ 3 ms median"},
		{what: "envd spawn → ready line, lean sandbox-envd, p99", m: m("envd/cmd/sandbox-envd.BenchmarkSpawnReady/lean", "p99-µs"), base: p("envd/cmd/sandbox-envd.BenchmarkSpawnReady/full", "p99-µs"), baseWhat: "`sandbox-mcp envd`, p99"},
		{what: "pause + resume (cgroup freezer), provider, p50", m: m("manage/local.BenchmarkPauseResume/freezer", "p50-µs"), base: p("manage/local.BenchmarkBwrapTrue", "p50-µs"), baseWhat: "`bwrap … /bin/true`"},
		{what: "Manager: cold acquire of a new workspace + first `true`, mean", m: m("manage/local.BenchmarkManagerColdAcquire", "ns/op"), base: p("manage/local.BenchmarkBwrapTrue", "p50-µs"), baseWhat: "`bwrap … /bin/true`"},
		{what: "Manager: warm acquire + release (running sandbox), mean", m: m("manage/local.BenchmarkManagerWarmAcquire", "ns/op"), base: p("manage/local.BenchmarkExecTrue", "p50-µs"), baseWhat: "os/exec `true`"},
		{what: "Manager: pause, then the next acquire resumes, mean", m: m("manage/local.BenchmarkManagerPauseResume", "ns/op"), base: p("manage/local.BenchmarkBwrapTrue", "p50-µs"), baseWhat: "`bwrap … /bin/true`"},
		{what: "cold docker sandbox create → first `true` (socket transport), p50", m: m("manage/docker.BenchmarkCreateToFirstRun/socket", "p50-µs"), base: p("manage/docker.BenchmarkDockerRunTrue", "p50-µs"), baseWhat: "`docker run --rm IMAGE true`"},
		{what: "cold docker sandbox create → first `true` (socket transport), p99", m: m("manage/docker.BenchmarkCreateToFirstRun/socket", "p99-µs"), base: p("manage/docker.BenchmarkDockerRunTrue", "p99-µs"), baseWhat: "`docker run --rm IMAGE true`, p99"},
		{what: "cold docker sandbox create → first `true` (tcp transport), p50", m: m("manage/docker.BenchmarkCreateToFirstRun/tcp", "p50-µs"), base: p("manage/docker.BenchmarkDockerRunTrue", "p50-µs"), baseWhat: "`docker run --rm IMAGE true`"},
		{what: "cold docker sandbox create → first `true` (tcp transport), p99", m: m("manage/docker.BenchmarkCreateToFirstRun/tcp", "p99-µs"), base: p("manage/docker.BenchmarkDockerRunTrue", "p99-µs"), baseWhat: "`docker run --rm IMAGE true`, p99"},
		{what: "`true` in a running docker sandbox via envd (socket), p50", m: m("manage/docker.BenchmarkExecTrue/envd-socket", "p50-µs"), base: p("manage/docker.BenchmarkExecTrue/docker-exec", "p50-µs"), baseWhat: "`docker exec CONTAINER true`"},
		{what: "`true` in a running docker sandbox via envd (tcp), p50", m: m("manage/docker.BenchmarkExecTrue/envd-tcp", "p50-µs"), base: p("manage/docker.BenchmarkExecTrue/docker-exec", "p50-µs"), baseWhat: "`docker exec CONTAINER true`"},
		{what: "`true` in a running docker sandbox via the Engine API's exec, p50", m: m("manage/docker.BenchmarkExecTrue/engine-exec", "p50-µs"), base: p("manage/docker.BenchmarkExecTrue/docker-exec", "p50-µs"), baseWhat: "`docker exec CONTAINER true`"},
		{what: "workspace_exec `true`, built binary over stdio (docker sandbox, socket), p50", m: m("main.BenchmarkStdioDockerExecTrue/socket", "p50-µs"), base: p("manage/docker.BenchmarkExecTrue/docker-exec", "p50-µs"), baseWhat: "`docker exec CONTAINER true`"},
		{what: "workspace_exec `true`, built binary over stdio (docker sandbox, socket), p99", m: m("main.BenchmarkStdioDockerExecTrue/socket", "p99-µs"), base: p("manage/docker.BenchmarkExecTrue/docker-exec", "p99-µs"), baseWhat: "`docker exec CONTAINER true`, p99"},
		{what: "workspace_exec `true`, built binary over stdio (docker sandbox, tcp), p50", m: m("main.BenchmarkStdioDockerExecTrue/tcp", "p50-µs"), base: p("manage/docker.BenchmarkExecTrue/docker-exec", "p50-µs"), baseWhat: "`docker exec CONTAINER true`"},
		{what: "workspace_exec `true`, built binary over stdio (docker sandbox, tcp), p99", m: m("main.BenchmarkStdioDockerExecTrue/tcp", "p99-µs"), base: p("manage/docker.BenchmarkExecTrue/docker-exec", "p99-µs"), baseWhat: "`docker exec CONTAINER true`, p99"},
		{what: "stdout throughput, 256 MiB through envd to the client", m: m("envd/envdclient.BenchmarkStdoutThroughput", "MB/s"), goal: "≥ 500 MB/s"},
		{what: "envd daemon peak RSS during 256 MiB of stdout", m: m("envd/envdclient.BenchmarkStdoutThroughput", "daemon-peak-MiB")},
		{what: "client peak RSS, 256 MiB of stdout", m: m("envd/envdclient.BenchmarkStdoutThroughput", "client-peak-MiB-256MiB"), base: p("envd/envdclient.BenchmarkStdoutThroughput", "client-peak-MiB-64MiB"), baseWhat: "client peak RSS, 64 MiB", goal: "independent of output size"},
		{what: "search_files' search (envd/search) of a 50k-file tree, rare match (500 lines), mean", m: m("envd/search.BenchmarkTree50k/search/rare", "ns/op"), base: p("envd/search.BenchmarkTree50k/grep/rare", "ns/op"), baseWhat: "`grep -rn` of the same tree"},
		{what: "search_files' search (envd/search) of a 50k-file tree, common match (500k lines), mean", m: m("envd/search.BenchmarkTree50k/search/common", "ns/op"), base: p("envd/search.BenchmarkTree50k/grep/common", "ns/op"), baseWhat: "`grep -rn` of the same tree"},
		{what: "put_files throughput (8 MiB file)", m: m("tools.BenchmarkPutFiles", "MB/s"), base: p("tools.BenchmarkCopyBaseline", "MB/s"), baseWhat: "cp of the same file on the host"},
		{what: "read_files throughput (8 MiB file)", m: m("tools.BenchmarkReadFiles", "MB/s"), base: p("tools.BenchmarkCopyBaseline", "MB/s"), baseWhat: "cp of the same file on the host"},
		{what: "put_files throughput (8 MiB text), built binary over stdio, raw JSON-RPC client", m: m("main.BenchmarkStdioRawPutFiles8MiB", "MB/s"), base: p("tools.BenchmarkCopyBaseline", "MB/s"), baseWhat: "cp of an 8 MiB file on the host", goal: "≥ 100 MB/s"},
		{what: "read_files throughput (8 MiB text), built binary over stdio, raw JSON-RPC client", m: m("main.BenchmarkStdioRawReadFiles8MiB", "MB/s"), base: p("tools.BenchmarkCopyBaseline", "MB/s"), baseWhat: "cp of an 8 MiB file on the host", goal: "≥ 100 MB/s"},
		{what: "put_files throughput (8 MiB text), built binary over stdio, mcp-go's client", m: m("main.BenchmarkStdioBinaryPutFiles/8MiB", "MB/s"), base: p("main.BenchmarkStdioRawPutFiles8MiB", "MB/s"), baseWhat: "the same with a raw JSON-RPC client"},
		{what: "read_files throughput (8 MiB text), built binary over stdio, mcp-go's client", m: m("main.BenchmarkStdioBinaryReadFiles/8MiB", "MB/s"), base: p("main.BenchmarkStdioRawReadFiles8MiB", "MB/s"), baseWhat: "the same with a raw JSON-RPC client"},
		{what: "server peak RSS, workspace_exec writing 64 MiB of stdout", m: m("main.BenchmarkServerRSS/64MiB", "server-peak-MiB"), base: p("main.BenchmarkServerRSS/true", "server-peak-MiB"), baseWhat: "after `true`"},
		{what: "server peak RSS, workspace_exec writing 256 MiB of stdout", m: m("main.BenchmarkServerRSS/256MiB", "server-peak-MiB"), base: p("main.BenchmarkServerRSS/64MiB", "server-peak-MiB"), baseWhat: "after 64 MiB of stdout", goal: "independent of output size"},
	}
}

// peerRow is one operation measured through sandbox-mcp and through the
// peer (Desktop Commander) in the same run, by the same client over stdio.
type peerRow struct {
	what       string
	ours, peer metric
}

func peerRows() []peerRow {
	m := func(bench, unit string) metric { return metric{bench, unit} }
	const ours, peer = "main.BenchmarkStdioBinary", "main.BenchmarkPeer"
	return []peerRow{
		{"write 1 MiB of text: put_files / write_file, mean", m(ours+"PutFiles/1MiB", "ns/op"), m(peer+"WriteFile/1MiB", "ns/op")},
		{"write 8 MiB of text: put_files / write_file, mean", m(ours+"PutFiles/8MiB", "ns/op"), m(peer+"WriteFile/8MiB", "ns/op")},
		{"read 1 MiB of text: read_files / read_file, mean", m(ours+"ReadFiles/1MiB", "ns/op"), m(peer+"ReadFile/1MiB", "ns/op")},
		{"read 8 MiB of text: read_files / read_file, mean", m(ours+"ReadFiles/8MiB", "ns/op"), m(peer+"ReadFile/8MiB", "ns/op")},
		{"`true` round trip: workspace_exec command (bash -c) / start_process (bash -l -c), p50", m(ours+"Exec/command", "p50-µs"), m(peer+"StartProcessTrue", "p50-µs")},
		{"`true` round trip: workspace_exec argv / start_process, p50", m(ours+"Exec/argv", "p50-µs"), m(peer+"StartProcessTrue", "p50-µs")},
	}
}

// peerCell formats a peer table value: a mean time also shows the
// benchmark's throughput, when it has one.
func peerCell(res results, m metric) (float64, string) {
	v, ok := res.get(m)
	if !ok {
		return 0, "not measured"
	}
	cell := fmtValue(v, m.unit)
	if rate, ok := res.get(metric{m.bench, "MB/s"}); ok && m.unit == "ns/op" {
		cell += fmt.Sprintf(" (%s)", fmtValue(rate, "MB/s"))
	}
	return v, cell
}

// peerReport writes the table of sandbox-mcp against the peer.
func peerReport(w io.Writer, res results, config map[string]string) {
	version := config["desktop-commander"]
	if version == "" {
		version = "(version not in the raw output)"
	}
	fmt.Fprintln(w, "## Against a peer: Desktop Commander")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Desktop Commander %s (npm `@wonderwhy-er/desktop-commander`, pinned in `testdata/peers`) is an MCP server that reads, writes and runs on the host, with no sandbox. "+
		"Both servers run as processes over stdio and are driven by the same client (mcp-go) in the same run; sandbox-mcp is the built binary with its local bwrap sandbox and `--max-read-bytes 8388608`, so one read_files call returns the 8 MiB file whole. "+
		"The peer's config sets its read and write line limits above the files' line counts. "+
		"Ratio: sandbox-mcp's time ÷ the peer's (below 1: sandbox-mcp is faster).\n\n", version)
	fmt.Fprintln(w, "| operation | sandbox-mcp | Desktop Commander | ratio |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, r := range peerRows() {
		ov, ours := peerCell(res, r.ours)
		pv, peer := peerCell(res, r.peer)
		ratio := ""
		if ov != 0 && pv != 0 {
			ratio = strconv.FormatFloat(ms(ov, r.ours.unit)/ms(pv, r.peer.unit), 'g', 3, 64) + "×"
		}
		tableRow(w, r.what, ours, peer, ratio)
	}
	fmt.Fprintln(w)
}

// machine describes the machine from the configuration lines of the input.
func machine(config map[string]string) []string {
	get := func(key string) string {
		if v := config[key]; v != "" {
			return v
		}
		return "unknown (not in the raw output)"
	}
	return []string{
		"kernel: " + get("kernel"),
		fmt.Sprintf("cpus: %s (%s)", get("cpus"), get("cpu")),
		"memory: " + get("memory"),
		fmt.Sprintf("load average (1, 5, 15 min): %s at the start, %s at the end", get("load-start"), get("load-end")),
		"go: " + get("go"),
		"bubblewrap: " + get("bubblewrap"),
	}
}

func report(w io.Writer, res results, config map[string]string, rawPath string) {
	date := config["date"]
	if date == "" {
		date = "an unknown date"
	}
	fmt.Fprintf(w, "# Benchmarks\n\nGenerated by `scripts/bench` on %s; do not edit by hand.\n\n", date)
	fmt.Fprintf(w, "Every number is the median of %s runs. Each ratio compares two benchmarks of the same run on the same machine, which is shared and noisy: read ratios, not absolute times. Latencies are per call (p50, p99) unless a row says mean (`ns/op`).\n\n", res.runs())
	fmt.Fprintln(w, "Machine:")
	fmt.Fprintln(w)
	for _, l := range machine(config) {
		fmt.Fprintf(w, "- %s\n", l)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| measurement | median | baseline (same run) | baseline median | ratio | goal | met |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rows() {
		v, ok := res.get(r.m)
		if !ok {
			tableRow(w, r.what, "not measured", "", "", "", r.goal, "")
			continue
		}
		val := fmtValue(v, r.m.unit)
		base, baseVal, ratioText := "", "", ""
		ratio, hasRatio := 0.0, false
		if r.base != nil {
			base = r.baseWhat
			baseVal = "not measured"
			if bv, ok := res.get(*r.base); ok && bv != 0 {
				baseVal = fmtValue(bv, r.base.unit)
				// Durations in different units (ns/op, µs) compare in ms.
				if isDuration(r.m.unit) && isDuration(r.base.unit) {
					ratio = ms(v, r.m.unit) / ms(bv, r.base.unit)
				} else {
					ratio = v / bv
				}
				hasRatio = true
				ratioText = strconv.FormatFloat(ratio, 'g', 3, 64) + "×"
			}
		}
		met := ""
		if r.goal != "" {
			if ok, judged := goalMet(r.goal, v, r.m.unit, ratio, hasRatio); judged {
				met = map[bool]string{true: "met", false: "**missed**"}[ok]
			}
		}
		tableRow(w, r.what, val, base, baseVal, ratioText, r.goal, met)
	}
	fmt.Fprintln(w)
	peerReport(w, res, config)
	fmt.Fprintln(w, "All benchmarks (medians):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| benchmark | metrics |")
	fmt.Fprintln(w, "| --- | --- |")
	keys := make([]string, 0, len(res))
	for k := range res {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		units := make([]string, 0, len(res[k]))
		for u := range res[k] {
			units = append(units, u)
		}
		slices.Sort(units)
		var parts []string
		for _, u := range units {
			v, _ := median(res[k][u])
			parts = append(parts, fmt.Sprintf("%s %s", strconv.FormatFloat(v, 'g', 4, 64), u))
		}
		tableRow(w, "`"+k+"`", strings.Join(parts, ", "))
	}
	if rawPath != "" {
		fmt.Fprintf(w, "\nRaw `go test -bench` output, with the machine lines: `%s`.\n", rawPath)
	}
}

// tableRow writes one Markdown table row.
func tableRow(w io.Writer, cells ...string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func main() {
	rawPath := flag.String("raw", "", "name the raw go test output file in the report")
	flag.Parse()
	res, config, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	report(w, res, config, *rawPath)
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

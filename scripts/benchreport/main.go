// Command benchreport turns the output of `go test -bench` (several
// packages, -count N) into the benchmark report: medians of every metric and
// ratios against baselines measured in the same run, with the machine they
// ran on. scripts/bench runs it; its output is docs/benchmarks.md.
//
//	go run ./scripts/benchreport [-raw FILE] < bench.txt > docs/benchmarks.md
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// results maps "pkg.BenchmarkName" → metric unit → values, one per run.
type results map[string]map[string][]float64

func parse(r io.Reader) (results, []string, error) {
	res := results{}
	var header []string
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimPrefix(strings.TrimPrefix(line, "pkg: "), "github.com/sandbox-mcp/sandbox-mcp")
			pkg = strings.TrimPrefix(pkg, "/")
			if pkg == "" {
				pkg = "main"
			}
			continue
		case strings.HasPrefix(line, "cpu: ") || strings.HasPrefix(line, "goos: ") || strings.HasPrefix(line, "goarch: "):
			if !slices.Contains(header, line) {
				header = append(header, line)
			}
			continue
		case !strings.HasPrefix(line, "Benchmark"):
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		key := pkg + "." + name
		if res[key] == nil {
			res[key] = map[string][]float64{}
		}
		// f[1] is the iteration count; then value unit pairs. Latency
		// percentiles are kept in µs whatever unit a benchmark used.
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			unit := f[i+1]
			if base, ok := strings.CutSuffix(unit, "-ms"); ok {
				unit, v = base+"-µs", v*1000
			}
			res[key][unit] = append(res[key][unit], v)
		}
	}
	return res, header, sc.Err()
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

// metric names one measured number.
type metric struct {
	bench string // "pkg.BenchmarkName" or "pkg.BenchmarkName/sub"
	unit  string // "ns/op", "p50-µs", "MB/s", …
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
	// higherIsBetter flips the ratio's meaning in the text (throughput).
	higherIsBetter bool
}

func fmtValue(v float64, unit string) string {
	switch unit {
	case "ns/op":
		return fmtDuration(time.Duration(v))
	case "p50-µs", "p99-µs":
		return fmtDuration(time.Duration(v * float64(time.Microsecond)))
	case "MB/s":
		return fmt.Sprintf("%.0f MB/s", v)
	}
	if strings.HasSuffix(unit, "MiB") || strings.Contains(unit, "-MiB") {
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

func rows() []row {
	m := func(bench, unit string) metric { return metric{bench, unit} }
	p := func(bench, unit string) *metric { return &metric{bench, unit} }
	return []row{
		{what: "`true` via envd client `Run` (unix socket, daemon process), p50", m: m("envd/client.BenchmarkRunTrue", "p50-µs"), base: p("envd/client.BenchmarkExecTrue", "p50-µs"), baseWhat: "os/exec `true`", goal: "ratio ≤ 2"},
		{what: "`true` via envd client `Run`, p99", m: m("envd/client.BenchmarkRunTrue", "p99-µs"), base: p("envd/client.BenchmarkExecTrue", "p99-µs"), baseWhat: "os/exec `true`, p99"},
		{what: "workspace_exec `true`, built binary over stdio (bwrap sandbox), p50", m: m("main.BenchmarkStdioBinaryExecTrue", "p50-µs"), base: p("envd/client.BenchmarkExecTrue", "p50-µs"), baseWhat: "os/exec `true`"},
		{what: "workspace_exec `true`, built binary over stdio, p99", m: m("main.BenchmarkStdioBinaryExecTrue", "p99-µs"), base: p("envd/client.BenchmarkExecTrue", "p99-µs"), baseWhat: "os/exec `true`, p99"},
		{what: "workspace_exec argv `true`, in-process MCP client (tools layer)", m: m("tools.BenchmarkWorkspaceExecTrue/argv", "ns/op"), base: p("tools.BenchmarkEnvdRunTrue", "ns/op"), baseWhat: "envd client alone, same kind of sandbox", goal: "ratio ≤ 1.5"},
		{what: "workspace_exec command `true` (bash -lc), in-process MCP client", m: m("tools.BenchmarkWorkspaceExecTrue/command", "ns/op"), base: p("tools.BenchmarkEnvdRunTrue", "ns/op"), baseWhat: "envd client alone"},
		{what: "workspace_exec `true` over stdio (server, in-process pipes), p50", m: m("server.BenchmarkStdioExecTrue", "p50-µs"), base: p("envd/client.BenchmarkRunTrue", "p50-µs"), baseWhat: "envd client alone", goal: "ratio ≤ 1.5"},
		{what: "workspace_exec `true` over HTTP (2025-11-25 session), p50", m: m("server.BenchmarkHTTPExecTrue/2025-11-25", "p50-µs"), base: p("envd/client.BenchmarkExecTrue", "p50-µs"), baseWhat: "os/exec `true`"},
		{what: "workspace_exec `true` over HTTP (2026-07-28 stateless), p50", m: m("server.BenchmarkHTTPExecTrue/2026-07-28", "p50-µs"), base: p("envd/client.BenchmarkExecTrue", "p50-µs"), baseWhat: "os/exec `true`"},
		{what: "32 HTTP sessions × 50 workspace_exec calls, p50", m: m("server.BenchmarkConcurrentSessions/exec", "p50-µs")},
		{what: "32 HTTP sessions × 50 workspace_exec calls, p99", m: m("server.BenchmarkConcurrentSessions/exec", "p99-µs"), base: p("server.BenchmarkConcurrentSessions/exec", "p50-µs"), baseWhat: "its own p50", goal: "p99 ≤ 10 × p50; 0 errors (a failed call fails the benchmark)"},
		{what: "32 HTTP sessions × 50 no-process calls, p99", m: m("server.BenchmarkConcurrentSessions/noop", "p99-µs"), base: p("server.BenchmarkConcurrentSessions/noop", "p50-µs"), baseWhat: "its own p50"},
		{what: "cold local sandbox create → first `true` (bwrap)", m: m("manage/local.BenchmarkCreateToFirstRun/bwrap", "ns/op"), base: p("manage/local.BenchmarkBwrapTrue", "ns/op"), baseWhat: "`bwrap … /bin/true`", goal: "≤ 50 ms median"},
		{what: "cold local sandbox create → first `true` (none)", m: m("manage/local.BenchmarkCreateToFirstRun/none", "ns/op"), base: p("manage/local.BenchmarkExecTrue", "ns/op"), baseWhat: "os/exec `true`"},
		{what: "pause + resume (cgroup freezer), provider", m: m("manage/local.BenchmarkPauseResume/freezer", "ns/op"), base: p("manage/local.BenchmarkBwrapTrue", "ns/op"), baseWhat: "`bwrap … /bin/true`"},
		{what: "Manager: cold acquire of a new workspace + first `true`", m: m("manage/local.BenchmarkManagerColdAcquire", "ns/op"), base: p("manage/local.BenchmarkBwrapTrue", "ns/op"), baseWhat: "`bwrap … /bin/true`"},
		{what: "Manager: warm acquire + release (running sandbox)", m: m("manage/local.BenchmarkManagerWarmAcquire", "ns/op"), base: p("manage/local.BenchmarkExecTrue", "ns/op"), baseWhat: "os/exec `true`"},
		{what: "Manager: pause, then the next acquire resumes", m: m("manage/local.BenchmarkManagerPauseResume", "ns/op"), base: p("manage/local.BenchmarkBwrapTrue", "ns/op"), baseWhat: "`bwrap … /bin/true`"},
		{what: "stdout throughput, 256 MiB through envd to the client", m: m("envd/client.BenchmarkStdoutThroughput", "MB/s"), goal: "≥ 500 MB/s", higherIsBetter: true},
		{what: "envd daemon peak RSS during 256 MiB of stdout", m: m("envd/client.BenchmarkStdoutThroughput", "daemon-peak-MiB")},
		{what: "client peak RSS, 256 MiB of stdout", m: m("envd/client.BenchmarkStdoutThroughput", "client-peak-MiB-256MiB"), base: p("envd/client.BenchmarkStdoutThroughput", "client-peak-MiB-64MiB"), baseWhat: "client peak RSS, 64 MiB", goal: "independent of output size"},
		{what: "put_files throughput (8 MiB file)", m: m("tools.BenchmarkPutFiles", "MB/s"), base: p("tools.BenchmarkCopyBaseline", "MB/s"), baseWhat: "cp of the same file on the host", higherIsBetter: true},
		{what: "read_files throughput (8 MiB file)", m: m("tools.BenchmarkReadFiles", "MB/s"), base: p("tools.BenchmarkCopyBaseline", "MB/s"), baseWhat: "cp of the same file on the host", higherIsBetter: true},
		{what: "server peak RSS, workspace_exec writing 256 MiB of stdout", m: m("main.BenchmarkServerRSS/256MiB", "server-peak-MiB"), base: p("main.BenchmarkServerRSS/true", "server-peak-MiB"), baseWhat: "after `true`", goal: "bounded"},
	}
}

func machine(header []string) []string {
	out := []string{}
	run := func(name string, args ...string) string {
		b, err := exec.Command(name, args...).Output()
		if err != nil {
			return "unknown"
		}
		return strings.TrimSpace(string(b))
	}
	out = append(out, "kernel: "+run("uname", "-srm"))
	out = append(out, fmt.Sprintf("cpus: %d (%s)", runtime.NumCPU(), strings.TrimSpace(strings.TrimPrefix(firstWith(header, "cpu: "), "cpu: "))))
	if mem := run("sh", "-c", "awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo"); mem != "" {
		out = append(out, "memory: "+mem)
	}
	out = append(out, "load average at the end: "+run("cut", "-d", " ", "-f", "1-3", "/proc/loadavg"))
	out = append(out, "go: "+runtime.Version())
	out = append(out, "bubblewrap: "+run("sh", "-c", "bwrap --version 2>/dev/null || echo none"))
	return out
}

func firstWith(lines []string, prefix string) string {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return "unknown"
}

func main() {
	rawPath := flag.String("raw", "", "also name the raw go test output file in the report")
	count := flag.Int("count", 0, "the -count the benchmarks ran with (for the report)")
	flag.Parse()
	res, header, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	fmt.Fprintf(w, "# Benchmarks\n\nGenerated by `scripts/bench` on %s; do not edit by hand.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "Every number is the median of %d runs. Each ratio compares two benchmarks of the same run on the same machine, which is shared and noisy: read ratios, not absolute times.\n\n", *count)
	fmt.Fprintln(w, "Machine:")
	fmt.Fprintln(w)
	for _, l := range machine(header) {
		fmt.Fprintf(w, "- %s\n", l)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| measurement | median | baseline (same run) | baseline median | ratio | goal |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
	for _, r := range rows() {
		v, ok := res.get(r.m)
		if !ok {
			fmt.Fprintf(w, "| %s | not measured | | | | %s |\n", r.what, r.goal)
			continue
		}
		val := fmtValue(v, r.m.unit)
		if r.base == nil {
			fmt.Fprintf(w, "| %s | %s | | | | %s |\n", r.what, val, r.goal)
			continue
		}
		bv, ok := res.get(*r.base)
		if !ok || bv == 0 {
			fmt.Fprintf(w, "| %s | %s | %s | not measured | | %s |\n", r.what, val, r.baseWhat, r.goal)
			continue
		}
		ratio := v / bv
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s× | %s |\n", r.what, val, r.baseWhat, fmtValue(bv, r.base.unit), strconv.FormatFloat(ratio, 'g', 3, 64), r.goal)
	}
	fmt.Fprintln(w)
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
		fmt.Fprintf(w, "| `%s` | %s |\n", k, strings.Join(parts, ", "))
	}
	if *rawPath != "" {
		fmt.Fprintf(w, "\nRaw `go test -bench` output: `%s`.\n", *rawPath)
	}
}

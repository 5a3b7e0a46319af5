package main

import (
	"bytes"
	"strings"
	"testing"
)

const oneCPU = `date: 2026-01-02 03:04 UTC
kernel: Linux 6.1 x86_64
cpus: 1
load-start: 0.10 0.20 0.30
goos: linux
pkg: github.com/sandbox-mcp/sandbox-mcp/server
cpu: Test CPU
BenchmarkHTTPExecTrue/2025-11-25         	     300	   4576000 ns/op	      4000 p50-µs	      8000 p99-µs
BenchmarkHTTPExecTrue/2025-11-25         	     300	   4576000 ns/op	      5000 p50-µs	      9000 p99-µs
BenchmarkHTTPExecTrue/2025-11-25         	     300	   4576000 ns/op	      6000 p50-µs	      7000 p99-µs
BenchmarkEnvdRunTrue                     	     300	   4576000 ns/op	      2000 p50-µs	      3000 p99-µs
BenchmarkEnvdRunTrue                     	     300	   4576000 ns/op	      2000 p50-µs	      3000 p99-µs
BenchmarkEnvdRunTrue                     	     300	   4576000 ns/op	      2000 p50-µs	      3000 p99-µs
load-end: 1.00 2.00 3.00
`

const twoCPUs = `pkg: github.com/sandbox-mcp/sandbox-mcp/server
BenchmarkHTTPExecTrue/2025-11-25-2         	     300	   4576000 ns/op	      4000 p50-µs
BenchmarkHTTPExecTrue/2025-11-25-2         	     300	   4576000 ns/op	      4000 p50-µs
BenchmarkEnvdRunTrue-2                     	     300	   4576000 ns/op	      2000 p50-µs
BenchmarkConcurrentSessions/exec-2         	       1	 4576000 ns/op	         0 errors
`

func TestParseNames(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want []string
	}{
		// GOMAXPROCS 1: go test appends no suffix, and the date's "-25"
		// is part of the name.
		"one CPU":  {oneCPU, []string{"server.BenchmarkHTTPExecTrue/2025-11-25", "server.BenchmarkEnvdRunTrue"}},
		"two CPUs": {twoCPUs, []string{"server.BenchmarkHTTPExecTrue/2025-11-25", "server.BenchmarkEnvdRunTrue", "server.BenchmarkConcurrentSessions/exec"}},
	} {
		t.Run(name, func(t *testing.T) {
			res, _, err := parse(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != len(tc.want) {
				t.Fatalf("benchmarks %v, want %v", keys(res), tc.want)
			}
			for _, k := range tc.want {
				if res[k] == nil {
					t.Fatalf("benchmarks %v, want %v", keys(res), tc.want)
				}
			}
		})
	}
}

func keys(r results) []string {
	var out []string
	for k := range r {
		out = append(out, k)
	}
	return out
}

func TestRuns(t *testing.T) {
	res, _, _ := parse(strings.NewReader(oneCPU))
	if got := res.runs(); got != "3" {
		t.Errorf("runs = %q, want 3", got)
	}
	res, _, _ = parse(strings.NewReader(twoCPUs))
	if got := res.runs(); got != "1–2" {
		t.Errorf("runs = %q, want 1–2", got)
	}
}

func TestGoalMet(t *testing.T) {
	for _, tc := range []struct {
		goal     string
		v        float64
		unit     string
		ratio    float64
		hasRatio bool
		met, ok  bool
	}{
		{"ratio ≤ 2", 0, "p50-µs", 1.9, true, true, true},
		{"ratio ≤ 2", 0, "p50-µs", 2.1, true, false, true},
		{"ratio ≤ 1.5", 0, "p50-µs", 0, false, false, false},
		{"p99 ≤ 10 × p50", 0, "p99-µs", 9, true, true, true},
		{"p99 ≤ 10 × p50", 0, "p99-µs", 11, true, false, true},
		{"≤ 50 ms median", 49000, "p50-µs", 0, false, true, true},
		{"≤ 50 ms median", 51000, "p50-µs", 0, false, false, true},
		{"≤ 50 ms", 49e6, "ns/op", 0, false, true, true},
		{"≥ 500 MB/s", 223, "MB/s", 0, false, false, true},
		{"≥ 500 MB/s", 501, "MB/s", 0, false, true, true},
		{"0", 0, "errors", 0, false, true, true},
		{"0", 3, "errors", 0, false, false, true},
		{"independent of output size", 1, "x", 1, true, false, false},
	} {
		met, ok := goalMet(tc.goal, tc.v, tc.unit, tc.ratio, tc.hasRatio)
		if met != tc.met || ok != tc.ok {
			t.Errorf("goalMet(%q, %v %s, ratio %v) = %v, %v; want %v, %v", tc.goal, tc.v, tc.unit, tc.ratio, met, ok, tc.met, tc.ok)
		}
	}
}

func TestReport(t *testing.T) {
	res, config, err := parse(strings.NewReader(oneCPU))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	report(&b, res, config, "raw.txt")
	out := b.String()
	for _, want := range []string{
		"on 2026-01-02 03:04 UTC",
		"median of 3 runs",
		"- kernel: Linux 6.1 x86_64\n",
		"- cpus: 1 (Test CPU)\n",
		"- load average (1, 5, 15 min): 0.10 0.20 0.30 at the start, 1.00 2.00 3.00 at the end\n",
		"| workspace_exec `true` over HTTP (2025-11-25 session), p50 | 5.00 ms | envd client `Run` alone (managetest) | 2.00 ms | 2.5× |  |  |\n",
		"| workspace_exec `true` over stdio (server, in-process pipes), p50 | not measured |  |  |  | ratio ≤ 1.5 |  |\n",
		"| `server.BenchmarkHTTPExecTrue/2025-11-25` |",
		"`raw.txt`",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// A missed goal says so.
	res, config, _ = parse(strings.NewReader(twoCPUs + "BenchmarkStdioExecTrue-2 300 1 ns/op 4000 p50-µs\n"))
	b.Reset()
	report(&b, res, config, "")
	if want := "| workspace_exec `true` over stdio (server, in-process pipes), p50 | 4.00 ms | envd client `Run` alone, same sandbox kind (managetest) | 2.00 ms | 2× | ratio ≤ 1.5 | **missed** |"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
	if want := "| 32 HTTP sessions × 50 workspace_exec calls, failed calls | 0 errors |  |  |  | 0 | met |"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
}

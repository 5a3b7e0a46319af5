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

// peerRun is a run with the transfer benchmarks and the peer's, the peer's
// read of 8 MiB and its `true` missing (a peer benchmark that failed).
const peerRun = `desktop-commander: 0.2.52
pkg: github.com/sandbox-mcp/sandbox-mcp
BenchmarkStdioRawPutFiles8MiB-2       	       5	  70000000 ns/op	 119.84 MB/s
BenchmarkStdioRawReadFiles8MiB-2      	       5	  90000000 ns/op	  93.21 MB/s
BenchmarkStdioBinaryPutFiles/8MiB-2   	       5	  80000000 ns/op	 104.86 MB/s	     79000 p50-µs
BenchmarkStdioBinaryPutFiles/8MiB-2   	       5	  90000000 ns/op	  93.21 MB/s	     89000 p50-µs
BenchmarkStdioBinaryPutFiles/8MiB-2   	       5	  70000000 ns/op	 119.84 MB/s	     69000 p50-µs
BenchmarkStdioBinaryReadFiles/8MiB-2  	       5	1000000000 ns/op	   8.39 MB/s	    999000 p50-µs
BenchmarkStdioBinaryExec/command-2    	     100	   4000000 ns/op	      3500 p50-µs
BenchmarkPeerWriteFile/8MiB-2         	       5	 320000000 ns/op	  26.21 MB/s	    319000 p50-µs
BenchmarkPeerReadFile/8MiB-2          	       5	 500000000 ns/op	  16.78 MB/s	    499000 p50-µs
`

func TestPeerReport(t *testing.T) {
	res, config, err := parse(strings.NewReader(peerRun))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	report(&b, res, config, "")
	out := b.String()
	for _, want := range []string{
		"## Against a peer: Desktop Commander\n",
		"Desktop Commander 0.2.52 (npm",
		"| operation | sandbox-mcp | Desktop Commander | ratio |\n",
		// Medians of three runs: 80 ms and 104.86 MB/s.
		"| write 8 MiB of text: put_files / write_file, mean | 80.00 ms (105 MB/s) | 320.00 ms (26 MB/s) | 0.25× |\n",
		"| read 8 MiB of text: read_files / read_file, mean | 1.00 s (8 MB/s) | 500.00 ms (17 MB/s) | 2× |\n",
		"| write 1 MiB of text: put_files / write_file, mean | not measured | not measured |  |\n",
		"| `true` round trip: workspace_exec command (bash -c) / start_process (bash -l -c), p50 | 3.50 ms | not measured |  |\n",
		// The goal rows of the main table.
		"| put_files throughput (8 MiB text), built binary over stdio, raw JSON-RPC client | 120 MB/s | cp of an 8 MiB file on the host | not measured |  | ≥ 100 MB/s | met |\n",
		"| read_files throughput (8 MiB text), built binary over stdio, raw JSON-RPC client | 93 MB/s | cp of an 8 MiB file on the host | not measured |  | ≥ 100 MB/s | **missed** |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// Without the configuration line the version is said to be missing.
	res, config, _ = parse(strings.NewReader(strings.TrimPrefix(peerRun, "desktop-commander: 0.2.52\n")))
	b.Reset()
	report(&b, res, config, "")
	if want := "Desktop Commander (version not in the raw output) (npm"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
}

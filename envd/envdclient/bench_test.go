//go:build linux

package envdclient_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

// BenchmarkRunTrue is one Run of `true` through the envd client over the
// unix socket of a daemon running as its own process. Compare with
// BenchmarkExecTrue, the same command through os/exec, in the same run.
func BenchmarkRunTrue(b *testing.B) {
	p := envdtest.StartProcess(b)
	c := newClient(b, p.Endpoint)
	cmd := envdclient.Command{Cmd: "/bin/true"}
	if _, err := c.Run(b.Context(), cmd, envdclient.RunOptions{}); err != nil { // warm the connection
		b.Fatal(err)
	}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		res, err := c.Run(b.Context(), cmd, envdclient.RunOptions{})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		ds = append(ds, time.Since(t0))
	}
	envdtest.ReportPercentiles(b, ds)
}

// BenchmarkExecTrue is the baseline for BenchmarkRunTrue.
func BenchmarkExecTrue(b *testing.B) {
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	envdtest.ReportPercentiles(b, ds)
}

// BenchmarkStdoutThroughput streams 256 MiB of stdout from the daemon (its
// own process) to the client with a 1 MiB capture, and reports the daemon's
// peak RSS and, measured in a fresh helper process, the client's peak RSS
// for 64 MiB and for 256 MiB of output: memory independent of output size.
func BenchmarkStdoutThroughput(b *testing.B) {
	const size = 256 << 20
	p := envdtest.StartProcess(b)
	c := newClient(b, p.Endpoint)
	cmd := envdclient.Command{Cmd: "head", Args: []string{"-c", strconv.Itoa(size), "/dev/zero"}}
	b.SetBytes(size)
	clientCPU, daemonCPU := selfCPU(), processCPU(p.Cmd.Process.Pid)
	for b.Loop() {
		res, err := c.Run(b.Context(), cmd, envdclient.RunOptions{StdoutLimit: 1 << 20})
		if err != nil || res.Stdout.Total != size {
			b.Fatal(res, err)
		}
	}
	b.StopTimer()
	perMiB := func(d time.Duration) float64 { return float64(d) / float64(b.N) / (size >> 20) }
	b.ReportMetric(perMiB(selfCPU()-clientCPU), "client-cpu-ns/MiB")
	b.ReportMetric(perMiB(processCPU(p.Cmd.Process.Pid)-daemonCPU), "daemon-cpu-ns/MiB")
	if rss, err := envdtest.PeakRSS(p.Cmd.Process.Pid); err == nil {
		b.ReportMetric(float64(rss)/(1<<20), "daemon-peak-MiB")
	}
	for _, n := range []int{64 << 20, size} {
		rss, err := clientPeakRSS(p.Endpoint, n)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rss)/(1<<20), fmt.Sprintf("client-peak-MiB-%dMiB", n>>20))
	}
}

// selfCPU returns the user and system CPU time of this process: a measure
// less disturbed by a busy machine than wall time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU returns the user and system CPU time of process pid, from
// /proc/pid/stat (in clock ticks, taken as 100 per second), or 0.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// clientPeakRSS runs TestClientRSSHelper in a new process (so its peak RSS
// covers only the client) for a Run of n bytes of stdout.
func clientPeakRSS(endpoint string, n int) (int64, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestClientRSSHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ENVD_RSS_ENDPOINT="+endpoint, "ENVD_RSS_BYTES="+strconv.Itoa(n))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("helper: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "peak_rss="); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("helper printed no peak_rss: %s", out)
}

// TestClientRSSHelper is run by clientPeakRSS in its own process; it does
// nothing in a normal test run.
func TestClientRSSHelper(t *testing.T) {
	endpoint := os.Getenv("ENVD_RSS_ENDPOINT")
	if endpoint == "" {
		// Not a missing part: the test only works when clientPeakRSS
		// starts it, so a plain skip.
		t.Skip("helper for BenchmarkStdoutThroughput")
	}
	n, _ := strconv.Atoi(os.Getenv("ENVD_RSS_BYTES"))
	c := newClient(t, endpoint)
	res, err := c.Run(t.Context(), envdclient.Command{Cmd: "head", Args: []string{"-c", strconv.Itoa(n), "/dev/zero"}}, envdclient.RunOptions{StdoutLimit: 1 << 20})
	if err != nil || res.Stdout.Total != int64(n) {
		t.Fatal(res, err)
	}
	rss, err := envdtest.PeakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("peak_rss=%d\n", rss)
}

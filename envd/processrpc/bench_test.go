//go:build linux

package processrpc

import (
	"context"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/sandbox-mcp/sandbox-mcp/proto/process"
)

// BenchmarkStartTrue measures a whole Start of `true` through the service
// and the generated client over h2c (binary protobuf): spawn, start event,
// end event. Compare with BenchmarkExecTrue.
func BenchmarkStartTrue(b *testing.B) {
	h := newHarness(b, harnessConfig{})
	ctx := context.Background()
	req := connect.NewRequest(&pb.StartRequest{Process: cmd("true"), Stdin: ptr(false)})
	for b.Loop() {
		s, err := h.h2.Start(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		var end *pb.ProcessEvent_EndEvent
		for s.Receive() {
			if e := s.Msg().GetEvent().GetEnd(); e != nil {
				end = e
			}
		}
		if err := s.Err(); err != nil || end.GetExitCode() != 0 {
			b.Fatalf("end %v, err %v", end, err)
		}
		_ = s.Close()
	}
}

// BenchmarkExecTrue is the baseline: os/exec running `true`.
func BenchmarkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStdout256MiB streams 256 MiB of stdout from the daemon to the
// client over h2c (binary protobuf); MB/s is the throughput.
func BenchmarkStdout256MiB(b *testing.B) {
	benchmarkStdout(b, 256<<20, false)
}

// BenchmarkStdout64MiBJSON is the same over HTTP/1.1 with the JSON codec (as
// E2B's SDKs speak), for comparison.
func BenchmarkStdout64MiBJSON(b *testing.B) {
	benchmarkStdout(b, 64<<20, true)
}

func benchmarkStdout(b *testing.B, total int, json bool) {
	h := newHarness(b, harnessConfig{})
	client := h.h2
	if json {
		client = h.json
	}
	ctx := context.Background()
	req := connect.NewRequest(&pb.StartRequest{Process: cmd("head", "-c", strconv.Itoa(total), "/dev/zero"), Stdin: ptr(false)})
	b.SetBytes(int64(total))
	cpu := cpuTime()
	defer func() { b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/float64(total)*(1<<20), "cpu-ns/MiB") }()
	for b.Loop() {
		s, err := client.Start(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		n, events := 0, 0
		for s.Receive() {
			n += len(s.Msg().GetEvent().GetData().GetStdout())
			events++
		}
		if err := s.Err(); err != nil || n != total {
			b.Fatalf("got %d bytes, err %v", n, err)
		}
		_ = s.Close()
		b.ReportMetric(float64(total)/float64(events), "B/event")
	}
}

// cpuTime returns the user and system CPU time this process has used, in
// nanoseconds: a measure less disturbed by a busy machine than wall time.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

//go:build linux

package envdtest

import (
	"slices"
	"testing"
	"time"
)

// ReportPercentiles reports the 50th and 99th percentiles of ds on b, in
// microseconds, as the metrics "p50-µs" and "p99-µs": the one latency form
// every benchmark of the project reports (scripts/benchreport reads it).
// It sorts ds.
func ReportPercentiles(b *testing.B, ds []time.Duration) {
	ReportPercentilesOf(b, "", ds)
}

// ReportPercentilesOf is ReportPercentiles for one part of what a benchmark
// measures: the metrics are "NAME-p50-µs" and "NAME-p99-µs" (plain
// "p50-µs" and "p99-µs" when name is empty).
func ReportPercentilesOf(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	prefix := ""
	if name != "" {
		prefix = name + "-"
	}
	b.ReportMetric(micros(Percentile(ds, 50)), prefix+"p50-µs")
	b.ReportMetric(micros(Percentile(ds, 99)), prefix+"p99-µs")
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted by the
// nearest-rank method: the smallest sample that at least p % of the
// samples are less than or equal to (the rank ⌈p·n/100⌉, in integers so
// that no rounding moves it). It returns 0 for no samples.
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func micros(d time.Duration) float64 {
	return float64(d) / float64(time.Microsecond)
}

//go:build linux

package envdtest

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	seq := func(n int) []time.Duration {
		ds := make([]time.Duration, n)
		for i := range ds {
			ds[i] = time.Duration(i + 1)
		}
		return ds
	}
	for _, tc := range []struct {
		n, p int
		want time.Duration
	}{
		{1, 50, 1}, {1, 99, 1},
		{2, 50, 1}, {2, 99, 2},
		{3, 50, 2}, {4, 50, 2}, {5, 50, 3},
		{100, 50, 50}, {100, 99, 99}, {100, 100, 100},
		{101, 99, 100}, {300, 99, 297}, {300, 50, 150},
		{1000, 99, 990}, {1600, 99, 1584},
	} {
		if got := Percentile(seq(tc.n), tc.p); got != tc.want {
			t.Errorf("Percentile(1..%d, %d) = %d, want %d", tc.n, tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %d", got)
	}
}

//go:build linux

package local

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	// comm may hold spaces and parentheses.
	line := "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615\n"
	st, ok := parseStat(line)
	if !ok || st.state != 'S' || st.ppid != 17 || st.start != "987654" {
		t.Errorf("parseStat = %+v, %v; want state S, ppid 17, start 987654", st, ok)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S", "1 (x) S notanumber 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 1 0 5"} {
		if st, ok := parseStat(bad); ok {
			t.Errorf("parseStat(%q) = %+v, want failure", bad, st)
		}
	}

	self, ok := readStat(os.Getpid())
	if !ok || self.state < 'A' || self.state > 'z' || self.ppid != os.Getppid() || self.start == "" {
		t.Errorf("readStat(self) = %+v, %v; want a state letter, parent %d, a start time", self, ok, os.Getppid())
	}
	if procStart(os.Getpid()) != self.start {
		t.Errorf("procStart(self) = %q, want %q", procStart(os.Getpid()), self.start)
	}
}

//go:build testhooks

package tools

import (
	"os"
	"strconv"
	"strings"
)

// crashAt is a test-only fault: SANDBOX_MCP_TEST_CRASH_BATCH=PHASE:K (PHASE
// upload or rename) makes the server kill itself with SIGKILL right after
// the K-th upload or rename of a batch, so tests of the real binary can
// crash it at a point they choose. It exists only in binaries built with
// -tags testhooks (as the tests build theirs), and is not documented for
// operators.
var crashPhase, crashAfter = crashAt()

func crashAt() (phase string, k int) {
	v := os.Getenv("SANDBOX_MCP_TEST_CRASH_BATCH")
	phase, n, ok := strings.Cut(v, ":")
	if !ok {
		return "", 0
	}
	k, err := strconv.Atoi(n)
	if err != nil || k <= 0 {
		return "", 0
	}
	return phase, k
}

// maybeCrash applies crashAt after done items of phase.
func maybeCrash(phase string, done int) {
	if crashPhase == phase && done == crashAfter {
		// Process.Kill is SIGKILL on Unix (TerminateProcess on Windows).
		if self, err := os.FindProcess(os.Getpid()); err == nil {
			_ = self.Kill()
		}
		select {} // the signal is on its way
	}
}

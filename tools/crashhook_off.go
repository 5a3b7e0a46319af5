//go:build !testhooks

package tools

// maybeCrash is a no-op: the test-only crash fault (SANDBOX_MCP_TEST_CRASH_BATCH)
// is only in binaries built with -tags testhooks.
func maybeCrash(string, int) {}

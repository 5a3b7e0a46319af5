package main

// testHoldLockEnv names the test-only hook that makes a replica die
// deterministically while it holds a creation lock (replicas_test.go): set
// to a file path, the first `serve` process, of all given the same path, to
// take a creation lock creates that file, logs "test hook: holding the
// creation lock" and then never returns from Lock, keeping the lock renewed
// until the process is killed. Processes that find the file already there
// are unaffected. Never set it outside tests. The hook exists only in binaries built with
// -tags testhooks (as the tests build theirs); in others the variable is
// ignored.
const testHoldLockEnv = "SANDBOX_MCP_TEST_HOLD_CREATION_LOCK"

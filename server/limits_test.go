package server

import (
	"context"
	"strings"
	"sync"
	"testing"
)

// One principal's calls past --max-concurrent-calls get an error result at
// once (not a hang), while another principal's calls proceed.
func TestMaxConcurrentCallsPerPrincipal(t *testing.T) {
	e := newEnv(t, envOptions{tokens: map[string]string{"token-a": "alice", "token-b": "bob"}, maxCalls: 2})
	alice := e.client(t, clientOptions{token: "token-a"})
	bob := e.client(t, clientOptions{token: "token-b"})
	var wg sync.WaitGroup
	results := make(chan string, 3)
	block := func(c *mcpClient) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.callErr(context.Background(), "test_block", map[string]any{}, nil)
			if err != nil {
				results <- err.Error()
				return
			}
			results <- resultText(res)
		}()
	}
	block(alice)
	block(alice)
	recv(t, e.blocks.started, "alice's first call")
	recv(t, e.blocks.started, "alice's second call")

	res := alice.call(t, "test_block", map[string]any{})
	if !res.IsError || !strings.Contains(resultText(res), "too many calls at once") || !strings.Contains(resultText(res), "--max-concurrent-calls 2") {
		t.Errorf("alice's third call: error %v, %q; want the limit named", res.IsError, resultText(res))
	}
	block(bob)
	recv(t, e.blocks.started, "bob's call while alice is at her limit")

	close(e.blocks.release)
	wg.Wait()
	close(results)
	for r := range results {
		if r != "released" {
			t.Errorf("a blocked call ended with %q; want released", r)
		}
	}
	// The slots are free again.
	if res := alice.call(t, "test_whoami", map[string]any{}); res.IsError {
		t.Errorf("alice after her calls ended: %s", resultText(res))
	}
}

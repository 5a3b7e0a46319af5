//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// One principal could create sandboxes without bound (each new
// Sandbox-Workspace name is a new sandbox) and fill the host for every
// tenant. Now --max-sandboxes-per-principal bounds them: the first calls of
// several new workspaces at once let exactly the limit through, the others
// get an error result naming the limit and how to free one, and another
// principal is unaffected.
func TestMaxSandboxesPerPrincipal(t *testing.T) {
	n := newNewcomer(t)
	tokens := filepath.Join(n.dir, "tokens.txt")
	if err := os.WriteFile(tokens, []byte("alicetoken alice\nbobtoken bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startHTTPServe(t, n, "--auth-tokens-file", tokens, "--max-sandboxes-per-principal", "2")
	ctx := t.Context()
	names := []string{"w1", "w2", "w3", "w4", "w5"}
	results := make([]string, len(names))
	failed := make([]bool, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		c := connectHTTP(t, s, "alicetoken", map[string]string{"Sandbox-Workspace": name})
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := callTool(t, ctx, c, "workspace_exec", map[string]any{"command": "echo ok"})
			results[i], failed[i] = textOf(res), res.IsError
		}()
	}
	wg.Wait()
	ok := 0
	for i := range names {
		switch {
		case !failed[i]:
			ok++
		case !strings.Contains(results[i], "--max-sandboxes-per-principal 2") || !strings.Contains(results[i], "end an MCP session"):
			t.Errorf("%s: error result %q; want the limit and how to free a sandbox", names[i], results[i])
		}
	}
	if ok != 2 {
		t.Fatalf("%d of alice's %d new workspaces got a sandbox under a limit of 2: %q", ok, len(names), results)
	}
	if dirs, _ := filepath.Glob(filepath.Join(n.dir, "state", "sandboxes", "l*")); len(dirs) != 2 {
		t.Errorf("sandbox directories: %d, want 2", len(dirs))
	}
	bob := connectHTTP(t, s, "bobtoken", map[string]string{"Sandbox-Workspace": "w1"})
	mustOK(t, "bob's first workspace", callTool(t, ctx, bob, "workspace_exec", map[string]any{"command": "echo ok"}))
}

// Replicas sharing a Redis count one principal's sandboxes together: six
// new workspaces' first calls spread over two replicas at once, under a
// limit of 2, make exactly 2 sandboxes in all, not 2 per replica, and the
// others get the limit's error result.
func TestMaxSandboxesPerPrincipalAcrossReplicas(t *testing.T) {
	cl := newReplicaCluster(t)
	replicas := []*replica{cl.start(t, "a", nil, "--max-sandboxes-per-principal", "2"), cl.start(t, "b", nil, "--max-sandboxes-per-principal", "2")}
	names := []string{"w1", "w2", "w3", "w4", "w5", "w6"}
	results := make([]string, len(names))
	failed := make([]bool, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		c := replicas[i%2].client(t, cl.token, name)
		wg.Go(func() {
			res := callTool(t, t.Context(), c, "workspace_exec", map[string]any{"command": "echo ok"})
			results[i], failed[i] = textOf(res), res.IsError
		})
	}
	wg.Wait()
	ok, made := 0, 0
	for i, name := range names {
		made += len(cl.sandboxesOf(t, workspaceKey(name)))
		switch {
		case !failed[i]:
			ok++
		case !strings.Contains(results[i], "--max-sandboxes-per-principal 2") || !strings.Contains(results[i], "end an MCP session"):
			t.Errorf("%s: error result %q; want the limit and how to free a sandbox", name, results[i])
		}
	}
	if ok != 2 || made != 2 {
		t.Fatalf("%d of %d new workspaces over two replicas got a sandbox, %d made, under a limit of 2: %q", ok, len(names), made, results)
	}
}

// Two servers on one state directory (two processes sharing state.db)
// count a principal's sandboxes together: six new workspaces' first calls
// spread over both at once, under a limit of 2, make exactly 2 sandboxes.
func TestMaxSandboxesPerPrincipalAcrossProcesses(t *testing.T) {
	n := newNewcomer(t)
	tokens := filepath.Join(n.dir, "tokens.txt")
	if err := os.WriteFile(tokens, []byte("alicetoken alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	servers := []*httpServer{
		startHTTPServe(t, n, "--auth-tokens-file", tokens, "--max-sandboxes-per-principal", "2"),
		startHTTPServe(t, n, "--auth-tokens-file", tokens, "--max-sandboxes-per-principal", "2"),
	}
	names := []string{"w1", "w2", "w3", "w4", "w5", "w6"}
	results := make([]string, len(names))
	failed := make([]bool, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		c := connectHTTP(t, servers[i%2], "alicetoken", map[string]string{"Sandbox-Workspace": name})
		wg.Go(func() {
			res := callTool(t, t.Context(), c, "workspace_exec", map[string]any{"command": "echo ok"})
			results[i], failed[i] = textOf(res), res.IsError
		})
	}
	wg.Wait()
	ok := 0
	for i, name := range names {
		switch {
		case !failed[i]:
			ok++
		case !strings.Contains(results[i], "--max-sandboxes-per-principal 2"):
			t.Errorf("%s: error result %q; want the limit", name, results[i])
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(n.dir, "state", "sandboxes", "l*"))
	if ok != 2 || len(dirs) != 2 {
		t.Fatalf("%d of %d new workspaces over two servers on one state directory got a sandbox, %d sandbox directories, under a limit of 2: %q", ok, len(names), len(dirs), results)
	}
}

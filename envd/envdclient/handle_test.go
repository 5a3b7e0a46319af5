//go:build linux

package envdclient_test

import (
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

func TestBackgroundHandleReconnectAndList(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	ctx := t.Context()
	cmd := sh(`read line; echo "got $line"; read line2; echo "then $line2"; exit 3`)
	cmd.Tag = "bg-1"
	h, err := c.Start(ctx, cmd, envdclient.StartOptions{Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	procs, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range procs {
		found = found || (p.Pid == h.Pid() && p.Tag == "bg-1" && p.Cmd == "/bin/sh")
	}
	if !found {
		t.Fatalf("List = %+v; want pid %d tagged bg-1", procs, h.Pid())
	}
	// Drop the first handle: the process keeps running.
	h.Disconnect()
	byPid, err := c.Connect(ctx, envdclient.ByPid(h.Pid()), envdclient.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byTag, err := c.Connect(ctx, envdclient.ByTag("bg-1"), envdclient.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if byTag.Pid() != h.Pid() {
		t.Fatalf("connect by tag gave pid %d, want %d", byTag.Pid(), h.Pid())
	}
	if err := byPid.SendInput(ctx, []byte("one\ntwo\n")); err != nil {
		t.Fatal(err)
	}
	for _, hh := range []*envdclient.Handle{byPid, byTag} {
		res, err := hh.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(res.Stdout.Bytes()); got != "got one\nthen two\n" || res.ExitCode != 3 {
			t.Errorf("attached handle saw %q exit %d", got, res.ExitCode)
		}
	}
	if err := c.Kill(ctx, envdclient.ByPid(h.Pid())); err != nil {
		t.Errorf("Kill of an ended process = %v; want nil (already gone is success)", err)
	}
	if _, err := c.Connect(ctx, envdclient.ByPid(999999), envdclient.RunOptions{}); !envdclient.IsNotFound(err) {
		t.Errorf("Connect to an unknown pid = %v; want not_found", err)
	}
}

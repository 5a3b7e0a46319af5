package daemon_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/cmdline"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
)

// TestFlagsFromEnvironment checks that every envd flag the command line
// leaves out is taken from its SANDBOX_MCP_* variable, and that the command
// line wins.
func TestFlagsFromEnvironment(t *testing.T) {
	fs := flag.NewFlagSet("envd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f daemon.Flags
	f.Register(fs)
	if err := fs.Parse([]string{"--root", "/from/flag"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"SANDBOX_MCP_ROOT":             "/from/env",
		"SANDBOX_MCP_LISTEN":           "unix:/run/envd.sock",
		"SANDBOX_MCP_CONFINE":          "true",
		"SANDBOX_MCP_ACCESS_TOKEN":     "t0ken",
		"SANDBOX_MCP_MAX_UPLOAD_BYTES": "1024",
		"SANDBOX_MCP_READY_FD":         "3",
		"SANDBOX_MCP_ENV":              "A=1,2\nB=3",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := cmdline.ApplyEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if f.Root != "/from/flag" || f.Listen != "unix:/run/envd.sock" || !f.Confine || f.AccessToken != "t0ken" ||
		f.MaxUploadBytes != 1024 || f.ReadyFD != 3 {
		t.Errorf("flags %+v", f)
	}
	if got := fs.Lookup("env").Value.String(); got != "A=1,2,B=3" {
		t.Errorf("--env %q", got)
	}
	fs = flag.NewFlagSet("envd", flag.ContinueOnError)
	f.Register(fs)
	env = map[string]string{"SANDBOX_MCP_MAX_UPLOAD_BYTES": "lots"}
	if err := cmdline.ApplyEnv(fs, lookup); err == nil || !strings.Contains(err.Error(), "SANDBOX_MCP_MAX_UPLOAD_BYTES") {
		t.Errorf("bad value: %v", err)
	}
}

func TestFlagsDefaults(t *testing.T) {
	fs := flag.NewFlagSet("envd", flag.ContinueOnError)
	var f daemon.Flags
	f.Register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if f.Listen != daemon.DefaultListen || f.ReadyFD != 0 || f.Root != "" {
		t.Errorf("defaults %+v", f)
	}
	if err := f.Run(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "--root is required") {
		t.Errorf("Run without --root: %v", err)
	}
	f.Root, f.ReadyFD = t.TempDir(), 987
	if err := f.Run(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "--ready-fd 987 is not open") {
		t.Errorf("Run with a closed --ready-fd: %v", err)
	}
}

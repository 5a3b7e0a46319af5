package main

import (
	"flag"
	"strings"
	"testing"
)

func TestWorkspaceFlag(t *testing.T) {
	for name, ok := range map[string]bool{"demo": true, "a.b_c-1": true, ".hidden": true, ".": false, "..": false, "a/b": false, "": true} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o := &serveOptions{}
		o.registerSandboxFlags(fs)
		o.workspace = name
		if err := o.check(); (err == nil) != ok {
			t.Errorf("--workspace %q: check() = %v", name, err)
		} else if err != nil && !strings.Contains(err.Error(), "--workspace") {
			t.Errorf("--workspace %q: the error does not name the flag: %v", name, err)
		}
	}
}

// TestLocalProviderError checks that --provider local is refused outside
// Linux with the reason and what is planned, and accepted on Linux.
func TestLocalProviderError(t *testing.T) {
	if err := localProviderError("linux", "arm64"); err != nil {
		t.Errorf("linux: %v", err)
	}
	for _, goos := range []string{"darwin", "windows"} {
		err := localProviderError(goos, "amd64")
		if err == nil {
			t.Fatalf("%s: no error", goos)
		}
		for _, want := range []string{"--provider local needs Linux", goos + "/amd64", "the docker provider (--provider docker) is planned"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q lacks %q", goos, err, want)
			}
		}
	}
}

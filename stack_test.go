//go:build linux

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

// TestProviderUnavailable checks that the local and docker providers are
// refused outside Linux with the reason and what is planned, and accepted on
// Linux, and that e2b is accepted everywhere.
func TestProviderUnavailable(t *testing.T) {
	for _, provider := range []string{providerLocal, "docker"} {
		if err := providerUnavailable(provider, "linux", "arm64"); err != nil {
			t.Errorf("%s on linux: %v", provider, err)
		}
		for _, goos := range []string{"darwin", "windows"} {
			err := providerUnavailable(provider, goos, "amd64")
			if err == nil {
				t.Fatalf("%s on %s: no error", provider, goos)
			}
			for _, want := range []string{"--provider " + provider + " needs", goos + "/amd64", "planned"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s on %s: %q lacks %q", provider, goos, err, want)
				}
			}
		}
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		if err := providerUnavailable("e2b", goos, "amd64"); err != nil {
			t.Errorf("e2b on %s: %v", goos, err)
		}
	}
}

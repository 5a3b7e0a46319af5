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

// TestProviderUnavailable checks that the local provider is refused
// outside Linux with the reason and what to use instead, and that docker
// (and auto) are accepted everywhere, as is e2b.
func TestProviderUnavailable(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, provider := range []string{"docker", providerAuto} {
			if err := providerUnavailable(provider, goos, "arm64"); err != nil {
				t.Errorf("%s on %s: %v", provider, goos, err)
			}
		}
	}
	if err := providerUnavailable(providerLocal, "linux", "amd64"); err != nil {
		t.Errorf("local on linux: %v", err)
	}
	for _, goos := range []string{"darwin", "windows"} {
		err := providerUnavailable(providerLocal, goos, "amd64")
		if err == nil {
			t.Fatalf("local on %s: no error", goos)
		}
		for _, want := range []string{"--provider local needs", goos + "/amd64", "--provider docker"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("local on %s: %q lacks %q", goos, err, want)
			}
		}
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		if err := providerUnavailable("e2b", goos, "amd64"); err != nil {
			t.Errorf("e2b on %s: %v", goos, err)
		}
	}
}

// TestDockerTransportFlag: --docker-transport takes auto, socket and tcp,
// and names itself when refusing anything else.
func TestDockerTransportFlag(t *testing.T) {
	for value, ok := range map[string]bool{"auto": true, "socket": true, "tcp": true, "": true, "ssh": false} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o := &serveOptions{}
		o.registerSandboxFlags(fs)
		o.dockerTransport = value
		if err := o.check(); (err == nil) != ok {
			t.Errorf("--docker-transport %q: check() = %v", value, err)
		} else if err != nil && !strings.Contains(err.Error(), "--docker-transport") {
			t.Errorf("--docker-transport %q: the error does not name the flag: %v", value, err)
		}
	}
}

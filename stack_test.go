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

// Package envdbin carries the lean envd (envd/cmd/sandbox-envd), built for
// Linux by `make envd` into its bin directory, inside the binaries that
// link it. The local provider installs the one for the host's architecture
// and runs it in sandboxes: it starts faster than the server binary's
// `envd` subcommand, which pays for the MCP stack's package init.
//
// The package builds for every GOOS, so a server built for macOS or
// Windows (`make cross`) carries the Linux envds too, for providers whose
// sandboxes are Linux machines elsewhere (containers, VMs).
//
// A tree built without make carries none, and Lookup reports so.
package envdbin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"strings"
	"sync"
)

// files is the bin directory: a README, and the built envds when `make
// envd` ran before the build.
//
//go:embed bin
var files embed.FS

// Name is the file name of the lean envd for linux/goarch in the bin
// directory: sandbox-envd-linux-<goarch>.
func Name(goarch string) string { return "sandbox-envd-linux-" + goarch }

// Envd is one embedded lean envd executable.
type Envd struct {
	// Name is its file name in the bin directory (Name(goarch)).
	Name string
	// Data is the executable.
	Data []byte
	// SHA256 is the hex SHA-256 of Data.
	SHA256 string
}

var (
	mu     sync.Mutex
	hashed = map[string]*Envd{}
)

// Lookup returns the embedded lean envd for linux/goarch, or nil when this
// binary carries none for it. The result is shared: do not modify Data.
func Lookup(goarch string) *Envd {
	name := Name(goarch)
	mu.Lock()
	defer mu.Unlock()
	if e := hashed[name]; e != nil {
		return e
	}
	// ReadFile copies the executable, so it is read once, here.
	data, err := files.ReadFile("bin/" + name)
	if err != nil || len(data) == 0 {
		return nil
	}
	sum := sha256.Sum256(data)
	e := &Envd{Name: name, Data: data, SHA256: hex.EncodeToString(sum[:])}
	hashed[name] = e
	return e
}

// List returns every embedded lean envd, by name, as Lookup returns them:
// none for a tree built without make.
func List() []*Envd {
	entries, err := files.ReadDir("bin")
	if err != nil {
		return nil
	}
	var all []*Envd
	for _, entry := range entries {
		goarch, ok := strings.CutPrefix(entry.Name(), Name(""))
		if !ok || goarch == "" {
			continue
		}
		if e := Lookup(goarch); e != nil {
			all = append(all, e)
		}
	}
	return all
}

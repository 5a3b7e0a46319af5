package docker

import (
	"os"
	"path/filepath"
	"strings"
)

// The files of a sandbox's host directory (<StateDir>/docker/ID) that say
// what the server made for it. The container cannot see that directory.
const (
	// containerFile holds the engine's id of the sandbox's container. A
	// container with the sandbox's name and labels but another engine id
	// was not made by this provider (someone copied the labels): it is
	// never adopted.
	containerFile = "container"
	// tokenFile holds envd's access token (the tcp transport).
	tokenFile = "token"
	// volumeFile names the docker volume that holds the workspace of a
	// named workspace, removed with the sandbox.
	volumeFile = "volume"
)

// writeRecord writes value to the file name of sandbox id's host
// directory, readable by the server's user only.
func (p *Provider) writeRecord(id, name, value string) error {
	return os.WriteFile(filepath.Join(p.sandboxDir(id), name), []byte(value+"\n"), 0o600)
}

// readRecord returns the file name of sandbox id's host directory, "" when
// there is none.
func (p *Provider) readRecord(id, name string) string {
	b, err := os.ReadFile(filepath.Join(p.sandboxDir(id), name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

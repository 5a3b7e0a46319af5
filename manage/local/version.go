//go:build linux

package local

import envd "github.com/sandbox-mcp/sandbox-mcp/envd/daemon"

// envdVersion is the envd protocol version of the daemon sandboxes run:
// built from the same tree as the server (the embedded lean envd, or the
// server binary itself), so the same package.
const envdVersion = envd.Version

package local

import envd "github.com/sandbox-mcp/sandbox-mcp/envd/daemon"

// envdVersion is the envd protocol version of the daemon sandboxes run: the
// same binary as the server, so the same package.
const envdVersion = envd.Version

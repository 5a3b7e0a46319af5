//go:build !linux

package doctor

import (
	"context"
	"runtime"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
)

// localChecks outside Linux: the local provider cannot run here, and which
// Linux envds the binary carries for sandboxes elsewhere.
func localChecks(_ context.Context, cfg Config) []Check {
	return []Check{localUnavailable(cfg, runtime.GOOS, runtime.GOARCH), linuxEnvdCheck(envdbin.List())}
}

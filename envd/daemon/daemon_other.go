//go:build !linux

package daemon

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

// errPlatform is why envd does not serve here: it runs inside Linux
// sandboxes only, and a server on another system reaches it there.
var errPlatform = fmt.Errorf("envd runs inside Linux sandboxes only, not on %s/%s", runtime.GOOS, runtime.GOARCH)

// Run refuses with errPlatform: the daemon's services are built for Linux
// only.
func Run(context.Context, Config, string, io.Writer) error { return errPlatform }

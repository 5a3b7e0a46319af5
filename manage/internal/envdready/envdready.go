// Package envdready waits for the line a starting envd writes once it
// listens ("ready ADDR\n", see envd/daemon), as both providers do: the local
// one on the ready pipe, the docker one on the container's output.
package envdready

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
)

// Wait reads r's first line and returns nil when it is envd's ready line.
// An error reading (EOF: envd died at start) or another line is an error; so
// is ctx ending first (ctx.Err(), as such). Reading goes on in the
// background until r is closed.
func Wait(ctx context.Context, r io.Reader) error {
	ch := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadString('\n')
		switch {
		case strings.HasPrefix(line, "ready "):
			ch <- nil
		case err != nil:
			ch <- err
		default:
			ch <- fmt.Errorf("unexpected line %q instead of envd's ready line", line)
		}
	}()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

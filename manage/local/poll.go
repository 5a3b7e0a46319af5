//go:build linux

package local

import (
	"context"
	"time"
)

// poll calls f until it reports done or fails, pausing between calls: first,
// then twice as long each time up to longest. It returns f's error, or
// ctx.Err() once ctx ends. For what the kernel finishes asynchronously and
// announces nowhere a goroutine could wait on (a freeze, a stop, a process
// leaving a cgroup).
func poll(ctx context.Context, first, longest time.Duration, f func() (bool, error)) error {
	pause := first
	for {
		if done, err := f(); done || err != nil {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		// Both may be ready at once; an ended ctx wins.
		if err := ctx.Err(); err != nil {
			return err
		}
		pause = min(pause*2, longest)
	}
}

package tools

import (
	"context"
	"fmt"
	"math"
	"time"
)

// progressEvery is how often the file tools report progress at most.
const progressEvery = 250 * time.Millisecond

// progressReporter returns a function that reports "<verb> n of total files"
// as progress, at most every progressEvery (and always for the last file).
// n counts from the start of the call: a call reporting several batches
// passes the files done before the batch plus those done in it.
func progressReporter(ctx context.Context, c *Call, total int, verb string) func(int) {
	var last time.Time
	return func(done int) {
		if done < total && time.Since(last) < progressEvery {
			return
		}
		last = time.Now()
		c.sendProgress(ctx, float64(done), fmt.Sprintf("%s %d of %d files", verb, done, total))
	}
}

// progressLoop sends a progress notification every interval until stop is
// closed: progress is the elapsed time in seconds, strictly increasing. It
// returns when stopped.
func progressLoop(ctx context.Context, c *Call, interval time.Duration, meter *outputMeter, stop <-chan struct{}) {
	start := time.Now()
	t := time.NewTicker(interval)
	defer t.Stop()
	last := 0.0
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			elapsed := time.Since(start)
			p := math.Round(elapsed.Seconds()*10) / 10
			if p <= last {
				p = last + 0.1
			}
			last = p
			c.sendProgress(ctx, p, meter.message(elapsed))
		}
	}
}

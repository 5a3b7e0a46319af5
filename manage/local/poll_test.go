//go:build linux

package local

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	calls := 0
	err := poll(context.Background(), time.Microsecond, time.Millisecond, func() (bool, error) {
		calls++
		return calls == 3, nil
	})
	if err != nil || calls != 3 {
		t.Errorf("poll until the third call = %v after %d calls; want nil after 3", err, calls)
	}

	boom := errors.New("boom")
	calls = 0
	err = poll(context.Background(), time.Microsecond, time.Millisecond, func() (bool, error) {
		calls++
		return false, boom
	})
	if !errors.Is(err, boom) || calls != 1 {
		t.Errorf("poll of a failing f = %v after %d calls; want boom after 1", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err = poll(ctx, time.Microsecond, time.Millisecond, func() (bool, error) {
		calls++
		if calls == 2 {
			cancel()
		}
		return false, nil
	})
	if !errors.Is(err, context.Canceled) || calls != 2 {
		t.Errorf("poll with its context canceled = %v after %d calls; want context.Canceled after 2", err, calls)
	}
}

package envdready

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestWait(t *testing.T) {
	ctx := context.Background()
	if err := Wait(ctx, strings.NewReader("ready unix:/x.sock\n")); err != nil {
		t.Errorf("ready line: %v", err)
	}
	if err := Wait(ctx, strings.NewReader("")); !errors.Is(err, io.EOF) {
		t.Errorf("nothing written: %v, want EOF", err)
	}
	if err := Wait(ctx, strings.NewReader("panic: boom\n")); err == nil || !strings.Contains(err.Error(), "panic: boom") {
		t.Errorf("another line: %v, want an error naming it", err)
	}
	r, w := io.Pipe()
	defer func() { _ = w.Close() }()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Wait(cctx, r); !errors.Is(err, context.Canceled) {
		t.Errorf("ctx ended first: %v, want context.Canceled", err)
	}
}

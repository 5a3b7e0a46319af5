package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandbox-mcp/sandbox-mcp/manage/internal/envdready"
)

// start starts sandbox id's container and returns once its envd is ready
// and its socket linked. envd writes its ready line on its standard output
// (--ready-fd 1), which start reads through an attach made before the
// start, so no output is missed and a container that exits before it is
// ready ends the wait at once, with what envd wrote on its standard error.
// The caller holds the sandbox's lock.
func (p *Provider) start(ctx context.Context, id string) error {
	name := containerName(id)
	dir := p.sandboxDir(id)
	socket := p.readRecord(id, tokenFile) == ""
	// The link from before leads to a socket nobody listens on any more.
	if err := os.Remove(socketPath(p.dir, id)); socket && err != nil && !errors.Is(err, os.ErrNotExist) {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: %w", id, err))
	}
	att, err := p.cli.ContainerAttach(ctx, name, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		return engineError("start sandbox "+id+": attach", err)
	}
	defer att.Close()
	outR, outW := io.Pipe()
	defer func() { _ = outR.Close() }()
	stderr := &tailBuffer{max: 8 << 10}
	go func() {
		_, err := stdcopy.StdCopy(outW, stderr, att.Reader)
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
	}()
	if err := p.cli.ContainerStart(ctx, name, container.StartOptions{}); err != nil {
		return engineError("start sandbox "+id, err)
	}
	err = envdready.Wait(ctx, outR)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return engineError("start sandbox "+id+": waiting for envd", err)
	}
	if err != nil {
		detail := "envd did not report ready (" + err.Error() + ")"
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if ci, ierr := p.cli.ContainerInspect(ictx, name); ierr == nil && ci.State != nil {
			_, state := mapState(ci.State)
			detail += "; " + state
		}
		cancel()
		if msg := trimLines(stderr.String(), 10); msg != "" {
			detail += "; envd said: " + msg
		}
		return connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: %s", id, detail))
	}
	if !socket {
		return nil
	}
	if err := refreshLink(dir); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: %w", id, err))
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it. Safe for concurrent
// use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

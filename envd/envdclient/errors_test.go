//go:build linux

package envdclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

func TestLossPredicates(t *testing.T) {
	// A daemon killed mid-stream: the call may have partly run.
	p := envdtest.StartProcess(t)
	c := newClient(t, p.Endpoint)
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background(), sh("sleep 300"), envdclient.RunOptions{OnStart: func(uint32) { close(started) }})
		errc <- err
	}()
	<-started
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	if !envdclient.IsPossibleLoss(err) || envdclient.IsNotSent(err) {
		t.Fatalf("Run cut mid-stream = %v; want a possible loss that may have been sent", err)
	}
	// Nobody listens any more: nothing can be sent.
	_, err = c.Run(t.Context(), sh("true"), envdclient.RunOptions{})
	if !envdclient.IsPossibleLoss(err) || !envdclient.IsNotSent(err) {
		t.Fatalf("Run against a dead socket = %v; want a possible loss, not sent", err)
	}
	var dial *envdclient.DialError
	if !errors.As(err, &dial) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dead socket error %v is not a DialError wrapping ECONNREFUSED", err)
	}

	// A proxy answering 502 (E2B's "sandbox not found") is a possible loss;
	// a 404 from envd is not.
	for status, loss := range map[int]bool{502: true, 503: true, 504: true, 404: false, 400: false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"code":%d,"message":"The sandbox was not found"}`, status)
		}))
		pc := newClient(t, srv.URL)
		_, serr := pc.Stat(t.Context(), "x")
		_, derr := pc.Download(t.Context(), "x")
		_, rerr := pc.Run(t.Context(), sh("true"), envdclient.RunOptions{})
		for what, e := range map[string]error{"rpc": serr, "rest": derr, "stream": rerr} {
			if envdclient.IsPossibleLoss(e) != loss {
				t.Errorf("HTTP %d via %s: IsPossibleLoss(%v) = %v, want %v", status, what, e, !loss, loss)
			}
		}
		srv.Close()
	}
}

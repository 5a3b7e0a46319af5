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

// TestProxySandboxNotFound: with sandbox routing, E2B's proxy answering 502
// "The sandbox was not found" for that very sandbox means the request
// reached no envd: a loss, and certainly not run, on every kind of call.
// Another sandbox's body, another message, or no routing is only a
// possible loss.
func TestProxySandboxNotFound(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		routed     bool
		notSent    bool
	}{
		{"this sandbox", `{"sandboxId":"sbx1","message":"The sandbox was not found","code":502}`, true, true},
		{"another sandbox", `{"sandboxId":"sbx2","message":"The sandbox was not found","code":502}`, true, false},
		{"another message", `{"sandboxId":"sbx1","message":"upstream reset","code":502}`, true, false},
		{"not json", `Bad Gateway`, true, false},
		{"no routing", `{"sandboxId":"sbx1","message":"The sandbox was not found","code":502}`, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadGateway)
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			var opts []envdclient.Option
			if tc.routed {
				opts = append(opts, envdclient.WithSandboxRouting("sbx1", 0))
			}
			c := newClient(t, srv.URL, opts...)
			_, serr := c.Stat(t.Context(), "x")
			_, derr := c.Download(t.Context(), "x")
			_, rerr := c.Run(t.Context(), sh("true"), envdclient.RunOptions{})
			for what, e := range map[string]error{"rpc": serr, "rest": derr, "stream": rerr} {
				var nf *envdclient.SandboxNotFoundError
				if !envdclient.IsPossibleLoss(e) || envdclient.IsNotSent(e) != tc.notSent || errors.As(e, &nf) != tc.notSent {
					t.Errorf("%s: %v: IsPossibleLoss %v, IsNotSent %v; want a loss, not sent %v",
						what, e, envdclient.IsPossibleLoss(e), envdclient.IsNotSent(e), tc.notSent)
				}
			}
		})
	}
}

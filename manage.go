package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/cmdline"

	"github.com/sandbox-mcp/sandbox-mcp/manage/docker"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bserver"
)

// stringList is a repeatable string flag.
type stringList []string

// String joins the values with commas.
func (l *stringList) String() string { return strings.Join(*l, ",") }

// Set adds one value.
func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// manageOptions are the flags of `manage serve`.
type manageOptions struct {
	listen          string
	apiKeys         stringList
	apiKeysFile     string
	domain          string
	maxTimeout      time.Duration
	readyFD         int
	shutdownTimeout time.Duration
	sandbox         serveOptions // provider, isolation, state-dir, docker-*
}

// loadAPIKeys reads a keys file: one key a line; blank lines and lines
// starting with # are skipped.
func loadAPIKeys(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keys = append(keys, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--api-keys-file %s: %w", path, err)
	}
	return keys, nil
}

// keys are the API keys of --api-key and --api-keys-file; at least one is
// required.
func (o *manageOptions) keys() ([]string, error) {
	keys := append([]string{}, o.apiKeys...)
	if o.apiKeysFile != "" {
		more, err := loadAPIKeys(o.apiKeysFile)
		if err != nil {
			return nil, err
		}
		keys = append(keys, more...)
	}
	if len(keys) == 0 {
		return nil, errors.New("no API key: give --api-key KEY (repeatable) or --api-keys-file FILE")
	}
	return keys, nil
}

// manageServeCommand is `sandbox-mcp manage serve`: E2B's management API
// (the sandbox subset) and E2B's envd proxy on one listener, over the local
// or docker provider, announcing the base URL on --ready-fd.
func manageServeCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	o := &manageOptions{}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:3000", "address (host:port) of the management API and the envd proxy")
	fs.Var(&o.apiKeys, "api-key", "an accepted X-API-Key (repeatable; each key sees only its own sandboxes)")
	fs.StringVar(&o.apiKeysFile, "api-keys-file", "", "file of accepted API keys, one a line (# comments)")
	fs.StringVar(&o.domain, "domain", "", "the sandbox domain reported to clients (\"\": none, SDKs use their own)")
	fs.DurationVar(&o.maxTimeout, "max-timeout", e2bserver.DefaultMaxTimeout, "longest sandbox time to live a client may ask")
	fs.IntVar(&o.readyFD, "ready-fd", 0, "file descriptor to write \"ready URL\" to once listening (0: none)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM, how long requests in flight get")
	fs.StringVar(&o.sandbox.provider, "provider", providerLocal, "sandbox provider: local or docker")
	fs.StringVar(&o.sandbox.isolation, "isolation", "auto", "local isolation: auto (bwrap when it works), bwrap, or none (unisolated, loudly warned)")
	fs.StringVar(&o.sandbox.stateDir, "state-dir", filepath.Join(defaultStateDir(), "manage"), "directory for sandboxes and the sandbox records (keep it apart from serve's)")
	fs.StringVar(&o.sandbox.dockerImage, "docker-image", docker.DefaultImage, "docker: the image sandboxes run (must be on the engine: it is never pulled)")
	fs.StringVar(&o.sandbox.dockerHost, "docker-host", "", "docker: the engine's address (default: $DOCKER_HOST, else "+docker.DefaultHost+")")
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		ready, err := cmdline.OpenReadyFD(o.readyFD)
		if err != nil {
			return err
		}
		defer ready.Close()
		keys, err := o.keys()
		if err != nil {
			return err
		}
		p := &o.sandbox
		if p.provider != providerLocal && p.provider != docker.Name {
			return fmt.Errorf("--provider %q: want local or docker", p.provider)
		}
		if err := providerUnavailable(p.provider, runtime.GOOS, runtime.GOARCH); err != nil {
			return err
		}
		if err := os.MkdirAll(p.stateDir, 0o711); err != nil {
			return err
		}
		provider, err := p.newProvider(ctx, g.log)
		if err != nil {
			return err
		}
		defer provider.Close(context.WithoutCancel(ctx))
		warnUnisolated(provider, g.log)
		srv, err := e2bserver.New(ctx, e2bserver.Config{
			Provider: provider, APIKeys: keys, StateDir: p.stateDir,
			Domain: o.domain, MaxTimeout: o.maxTimeout, Logger: g.log,
		})
		if err != nil {
			return err
		}
		defer srv.Close(context.WithoutCancel(ctx))
		ln, err := net.Listen("tcp", o.listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", o.listen, err)
		}
		url := "http://" + ln.Addr().String()
		g.log.Info("serving the E2B management API and envd proxy", "url", url, "provider", provider.Name(), "keys", len(keys))
		if err := ready.Announce(url); err != nil {
			ln.Close()
			return err
		}
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 640 * time.Second}
		errc := make(chan error, 1)
		go func() { errc <- hs.Serve(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			_ = hs.Close()
		}
		return nil
	}
}

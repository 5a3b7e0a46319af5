package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/cmdline"

	"github.com/sandbox-mcp/sandbox-mcp/server"
)

// httpOptions are serve's transport flags.
type httpOptions struct {
	addr            string
	authTokensFile  string
	allowedOrigins  string
	tlsCert, tlsKey string
	maxBodyBytes    byteSize
	// maxRequestMemory is --max-request-memory (0: no budget).
	maxRequestMemory byteSize
	sessionIdleTTL   time.Duration
	shutdownTimeout  time.Duration
	readyFD          int
	insecureNoAuth   bool
	// maxConcurrentCalls is --max-concurrent-calls.
	maxConcurrentCalls int
	// generatedToken is the token made at start for a loopback --http
	// without --auth-tokens-file (see httptoken.go); "" otherwise.
	generatedToken string
}

// register adds the transport flags; the defaults of the limits are the
// server's.
func (h *httpOptions) register(fs *flag.FlagSet) {
	h.maxBodyBytes = byteSize(server.DefaultMaxBodyBytes)
	h.maxRequestMemory = byteSize(server.DefaultMaxRequestMemory)
	fs.StringVar(&h.addr, "http", "", "serve streamable HTTP at ADDR (host:port) on /mcp instead of stdio")
	fs.StringVar(&h.authTokensFile, "auth-tokens-file", "", "file of \"TOKEN PRINCIPAL\" lines; required unless --http is loopback, which without it generates a token (STATE-DIR/http-token)")
	fs.BoolVar(&h.insecureNoAuth, "insecure-no-auth", false, "loopback --http with NO token: every user of this machine can use the server and the sandboxes of principal local")
	fs.StringVar(&h.allowedOrigins, "allowed-origins", "", "comma-separated browser origins allowed to call (others get 403)")
	fs.StringVar(&h.tlsCert, "tls-cert", "", "PEM certificate: serve HTTPS")
	fs.StringVar(&h.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.Var(&h.maxBodyBytes, "max-body-bytes", "largest HTTP request body (413 beyond)")
	fs.Var(&h.maxRequestMemory, "max-request-memory", "request bodies the HTTP server holds at once over all principals (one principal at most half when there are several); a request past it gets 503 with Retry-After (0: no budget)")
	fs.IntVar(&h.maxConcurrentCalls, "max-concurrent-calls", server.DefaultMaxConcurrentCalls, "tool calls one HTTP principal may have running at once (more get an error result)")
	fs.DurationVar(&h.sessionIdleTTL, "session-idle-ttl", 30*time.Minute, "end HTTP sessions idle this long (0: never)")
	fs.DurationVar(&h.shutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "on SIGTERM, how long in-flight calls get before they are cancelled")
	fs.IntVar(&h.readyFD, "ready-fd", 0, "file descriptor to write \"ready URL\" to once HTTP is listening (0: none)")
}

// serverConfig is the transport's part of the server's config. With --http
// it loads the tokens and refuses to listen beyond loopback without them;
// on loopback without them it generates one (principal local), unless
// --insecure-no-auth.
func (h *httpOptions) serverConfig() (server.Config, error) {
	cfg := server.Config{
		MaxBodyBytes:       int64(h.maxBodyBytes),
		MaxConcurrentCalls: h.maxConcurrentCalls,
		MaxRequestMemory:   int64(h.maxRequestMemory),
		SessionIdleTTL:     h.sessionIdleTTL,
		TLSCert:            h.tlsCert,
		TLSKey:             h.tlsKey,
		ShutdownTimeout:    h.shutdownTimeout,
	}
	if cfg.MaxRequestMemory == 0 {
		cfg.MaxRequestMemory = -1 // server.Config's "no budget"
	}
	if h.allowedOrigins != "" {
		// server.New trims them and skips empty ones.
		cfg.AllowedOrigins = strings.Split(h.allowedOrigins, ",")
	}
	if h.addr == "" {
		return cfg, nil
	}
	if h.insecureNoAuth && h.authTokensFile != "" {
		return cfg, fmt.Errorf("--insecure-no-auth and --auth-tokens-file contradict each other: drop one")
	}
	if h.authTokensFile != "" {
		tokens, err := server.LoadTokens(h.authTokensFile)
		if err != nil {
			return cfg, err
		}
		cfg.AuthTokens = tokens
	}
	if err := server.CheckListen(h.addr, cfg.AuthTokens); err != nil {
		return cfg, err
	}
	if len(cfg.AuthTokens) == 0 && !h.insecureNoAuth {
		h.generatedToken = newHTTPToken()
		cfg.AuthTokens = map[string]string{h.generatedToken: server.LocalPrincipal}
	}
	return cfg, nil
}

// serveCommand is `sandbox-mcp serve`: MCP over stdio, or over streamable
// HTTP with --http, announcing the endpoint URL on --ready-fd.
func serveCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	o := &serveOptions{}
	o.registerSandboxFlags(fs)
	h := &httpOptions{}
	h.register(fs)
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		// Opened first: a descriptor that is not open fails before any work.
		ready, err := cmdline.OpenReadyFD(h.readyFD)
		if err != nil {
			return err
		}
		defer ready.Close()
		cfg, err := h.serverConfig()
		if err != nil {
			return err
		}
		st, err := o.build(ctx, g.log, cfg)
		if err != nil {
			return err
		}
		defer st.close(context.Background())
		if h.addr != "" {
			if err := refuseUnisolatedHTTP(st.provider, o.isolation); err != nil {
				return err
			}
		}
		if h.addr == "" {
			return st.server.ServeStdio(ctx, os.Stdin, g.stdout)
		}
		ln, err := net.Listen("tcp", h.addr)
		if err != nil {
			return fmt.Errorf("--http %s: %w", h.addr, err)
		}
		url := st.server.EndpointURL(ln.Addr())
		switch {
		case h.generatedToken != "":
			path, err := writeHTTPToken(o.stateDir, h.generatedToken)
			if err != nil {
				ln.Close()
				return err
			}
			defer removeHTTPToken(path, h.generatedToken)
			fmt.Fprintf(g.stderr, "sandbox-mcp: serving %s  token: %s\nsandbox-mcp: send it as \"Authorization: Bearer TOKEN\"; it is also in %s (mode 0600) while the server runs\n", url, h.generatedToken, path)
		case h.insecureNoAuth:
			g.log.Warn("serving HTTP WITHOUT authentication (--insecure-no-auth): every user of this machine can use this server and the sandboxes and files of principal local", "url", url)
		}
		if err := ready.Announce(url); err != nil {
			ln.Close()
			return err
		}
		return st.server.ServeHTTP(ctx, ln)
	}
}

package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2b"
)

// e2bOptions are the e2b provider's flags. Those left empty fall back to
// E2B's own environment variables (as E2B's SDKs read them), resolved when
// used: the API key never appears in usage text or logs.
type e2bOptions struct {
	key, domain, apiURL, sandboxURL, template, workdir string
}

// register adds the --e2b-* flags.
func (e *e2bOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&e.key, "e2b-api-key", "", "e2b: the API key (default: $E2B_API_KEY); never logged")
	fs.StringVar(&e.domain, "e2b-domain", "", "e2b: E2B's domain (default: $E2B_DOMAIN, else "+e2b.DefaultDomain+")")
	fs.StringVar(&e.apiURL, "e2b-api-url", "", "e2b: the management API's URL (default: $E2B_API_URL, else https://api.DOMAIN)")
	fs.StringVar(&e.sandboxURL, "e2b-sandbox-url", "", "e2b: where every sandbox's envd is reached, routed by headers (default: $E2B_SANDBOX_URL, else as E2B's SDKs do)")
	fs.StringVar(&e.template, "e2b-template", e2b.DefaultTemplate, "e2b: the template sandboxes are created from")
	fs.StringVar(&e.workdir, "e2b-workdir", e2b.DefaultWorkdir, "e2b: the workspace root in the sandbox (E2B's templates: the user's home; manage serve: /workspace)")
}

// orEnv is v, else the environment variable name.
func orEnv(v, name string) string {
	if v != "" {
		return v
	}
	return os.Getenv(name)
}

func (e *e2bOptions) apiKey() string { return orEnv(e.key, "E2B_API_KEY") }

// resolvedDomain is the domain flag, else E2B_DOMAIN, else E2B's default.
func (e *e2bOptions) resolvedDomain() string {
	if d := orEnv(e.domain, "E2B_DOMAIN"); d != "" {
		return d
	}
	return e2b.DefaultDomain
}

// resolvedAPIURL is the management API's base URL.
func (e *e2bOptions) resolvedAPIURL() string {
	return e2b.APIURL(orEnv(e.apiURL, "E2B_API_URL"), e.resolvedDomain())
}

// config is the provider's configuration; stateDir seeds the owner label.
func (e *e2bOptions) config(stateDir string, log *slog.Logger) e2b.Config {
	return e2b.Config{
		APIKey:     e.apiKey(),
		Domain:     e.resolvedDomain(),
		APIURL:     e.resolvedAPIURL(),
		SandboxURL: orEnv(e.sandboxURL, "E2B_SANDBOX_URL"),
		Template:   e.template,
		Workdir:    e.workdir,
		Owner:      e2b.DefaultOwner(stateDir),
		Logger:     log,
	}
}

// newE2BProvider starts the e2b provider; a key the API refuses fails here.
func (o *serveOptions) newE2BProvider(ctx context.Context, log *slog.Logger) (sandboxProvider, error) {
	p, err := e2b.New(ctx, o.e2b.config(o.stateDir, log))
	if err != nil {
		return nil, err
	}
	return p, nil
}

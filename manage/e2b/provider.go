package e2b

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

// Name is the provider's name.
const Name = "e2b"

// Isolation is what Sandbox.Isolation says of an E2B sandbox: a
// Firecracker microVM of its own.
const Isolation = "e2b-microvm"

// Defaults of Config.
const (
	// DefaultDomain is E2B's cloud.
	DefaultDomain = "e2b.app"
	// DefaultTemplate is E2B's base template.
	DefaultTemplate = "base"
	// DefaultLifetime is a sandbox's time to live without a call: created
	// with it, extended to it by every call (KeepAlive) and by a resume.
	// When it runs out E2B pauses the sandbox (it is created with
	// autoPause), so it costs nothing and its files and processes wait.
	DefaultLifetime = 15 * time.Minute
	// DefaultWorkdir is the workspace root: the home of E2B's default user
	// in its templates.
	DefaultWorkdir = "/home/user"
)

// Metadata labels every sandbox carries (E2B metadata keys).
const (
	MetaPrefix     = "sandbox-mcp."
	MetaProvider   = MetaPrefix + "provider"   // "e2b"
	MetaOwner      = MetaPrefix + "owner"      // Config.Owner
	MetaKey        = MetaPrefix + "key"        // the workspace key
	MetaNamed      = MetaPrefix + "named"      // "true" for a named workspace
	MetaGeneration = MetaPrefix + "generation" // the generation it was made for
)

// sharedHostDomains are the domains whose envd E2B's SDKs reach through the
// shared host sandbox.<domain>, routing with the E2b-Sandbox-* headers.
var sharedHostDomains = map[string]bool{"e2b.app": true, "e2b.dev": true, "e2b.pro": true, "e2b-staging.dev": true}

// Config configures a Provider. APIKey is required.
type Config struct {
	// APIKey is E2B's API key (e2b_…), sent as X-API-Key, never logged.
	APIKey string
	// Domain is E2B's domain. Default DefaultDomain.
	Domain string
	// APIURL is the management API's base URL. Default https://api.<Domain>.
	APIURL string
	// SandboxURL, when set, is where every sandbox's envd is reached, routed
	// by the E2b-Sandbox-Id and E2b-Sandbox-Port headers (the SDKs'
	// E2B_SANDBOX_URL). Default: as E2B's SDKs do (see Endpoint).
	SandboxURL string
	// Template is the template sandboxes are created from when their
	// SandboxConfig names none. Default DefaultTemplate.
	Template string
	// Lifetime is a sandbox's time to live without a call when its
	// SandboxConfig sets none. Default DefaultLifetime; at most MaxRefresh.
	Lifetime time.Duration
	// Workdir is the workspace root in the sandbox. Default DefaultWorkdir.
	Workdir string
	// Owner is the value of every sandbox's MetaOwner label, which List
	// filters on. Default: DefaultOwner("").
	Owner string
	// ClientOptions configure the management API client (timeouts, retries).
	ClientOptions []Option
	// EnvdOptions are added to the envd client of every sandbox (for
	// example envdclient.WithTLSConfig).
	EnvdOptions []envdclient.Option
	// Logger receives the provider's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// DefaultOwner derives an owner label from the host name and seed (say, the
// state directory), so servers of one host and state share their sandboxes
// and other servers on the same E2B team do not list them.
func DefaultOwner(seed string) string {
	hostname, _ := os.Hostname()
	sum := sha256.Sum256([]byte(hostname + "\x00" + seed))
	return hex.EncodeToString(sum[:8])
}

// APIURL returns the management API's base URL for apiURL and domain as
// Config takes them: apiURL, else https://api.<domain>.
func APIURL(apiURL, domain string) string {
	if apiURL != "" {
		return apiURL
	}
	if domain == "" {
		domain = DefaultDomain
	}
	return "https://api." + domain
}

// Provider is the E2B sandbox provider. It is safe for concurrent use.
type Provider struct {
	api        *Client
	log        *slog.Logger
	domain     string
	sandboxURL string
	template   string
	lifetime   time.Duration
	workdir    string
	owner      string
	envdOpts   []envdclient.Option

	mu    sync.Mutex
	known map[string]access // what the API said of each sandbox lately
}

// access is what reaching a sandbox's envd needs, as the API reports it.
type access struct {
	token       string
	domain      string
	envdVersion string
}

var (
	_ manage.Provider   = (*Provider)(nil)
	_ manage.KeepAliver = (*Provider)(nil)
)

// New returns a provider and checks the API key with one list call: a key
// the API refuses is an error here, before anything else happens. An API
// that cannot be reached is only logged (it may come back before the first
// sandbox is needed).
func New(ctx context.Context, cfg Config) (*Provider, error) {
	domain := cfg.Domain
	if domain == "" {
		domain = DefaultDomain
	}
	api, err := NewClient(APIURL(cfg.APIURL, domain), cfg.APIKey, cfg.ClientOptions...)
	if err != nil {
		return nil, fmt.Errorf("e2b provider: %w", err)
	}
	p := &Provider{
		api: api, log: cfg.Logger, domain: domain, sandboxURL: strings.TrimSuffix(cfg.SandboxURL, "/"),
		template: cfg.Template, lifetime: cfg.Lifetime, workdir: cfg.Workdir, owner: cfg.Owner,
		envdOpts: cfg.EnvdOptions, known: map[string]access{},
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.template == "" {
		p.template = DefaultTemplate
	}
	if p.lifetime <= 0 {
		p.lifetime = DefaultLifetime
	}
	p.lifetime = min(p.lifetime, MaxRefresh)
	if p.workdir == "" {
		p.workdir = DefaultWorkdir
	}
	if p.owner == "" {
		p.owner = DefaultOwner("")
	}
	if err := p.CheckAPIKey(ctx); err != nil {
		if IsUnauthorized(err) {
			return nil, fmt.Errorf("e2b provider: %w", err)
		}
		p.log.Warn("e2b provider: the management API could not be reached yet", "api", api.BaseURL(), "err", err)
	}
	p.log.Debug("e2b provider ready", "api", api.BaseURL(), "domain", domain, "sandbox_url", p.sandboxURL, "template", p.template, "owner", p.owner)
	return p, nil
}

// CheckAPIKey makes one cheap authenticated call (Client.CheckKey): an
// error for which IsUnauthorized holds means the key is wrong.
func (p *Provider) CheckAPIKey(ctx context.Context) error { return p.api.CheckKey(ctx) }

// Name returns "e2b".
func (p *Provider) Name() string { return Name }

// API returns the provider's management API client.
func (p *Provider) API() *Client { return p.api }

// Owner returns the owner label of this provider's sandboxes.
func (p *Provider) Owner() string { return p.owner }

// Close releases nothing: sandboxes live on in E2B, and the Manager pauses
// or kills them at the end of their sessions.
func (p *Provider) Close(context.Context) error { return nil }

// lifetimeOf is the time to live for cfg.
func (p *Provider) lifetimeOf(cfg manage.SandboxConfig) time.Duration {
	if cfg.Lifetime > 0 {
		return min(cfg.Lifetime, MaxRefresh)
	}
	return p.lifetime
}

// Create makes a sandbox from cfg's template (or the provider's) that E2B
// pauses, rather than kills, when its time to live runs out, and resumes
// when envd traffic reaches it paused; it carries the metadata labels.
// Limits are the template's (E2B sets CPU and memory per template).
func (p *Provider) Create(ctx context.Context, cfg manage.SandboxConfig) (manage.Sandbox, error) {
	template := cfg.Template
	if template == "" {
		template = p.template
	}
	if cfg.Network.IsAllow() {
		return manage.Sandbox{}, fmt.Errorf(
			"the e2b provider supports only --network on or off (E2B's allow_internet_access), not %s", cfg.Network)
	}
	if err := cfg.Network.Check(); err != nil {
		return manage.Sandbox{}, err
	}
	yes, network := true, cfg.Network.IsOn()
	req := e2bapi.NewSandbox{
		TemplateID:    template,
		Timeout:       seconds(p.lifetimeOf(cfg)),
		AutoPause:     &yes,
		AutoResume:    &e2bapi.AutoResume{Enabled: true},
		Secure:        &yes,
		AllowInternet: &network,
		Metadata: map[string]string{
			MetaProvider:   Name,
			MetaOwner:      p.owner,
			MetaKey:        cfg.Key,
			MetaNamed:      strconv.FormatBool(cfg.Named),
			MetaGeneration: strconv.FormatInt(cfg.Generation, 10),
		},
		EnvVars: cfg.Env,
	}
	created := time.Now().UTC()
	sb, err := p.api.Create(ctx, req)
	if err != nil {
		return manage.Sandbox{}, err
	}
	if sb.SandboxID == "" {
		return manage.Sandbox{}, errors.New("e2b api: create sandbox: the answer has no sandboxID")
	}
	p.remember(sb.SandboxID, sb.EnvdAccessToken, sb.Domain, sb.EnvdVersion)
	p.log.Debug("e2b sandbox created", "id", sb.SandboxID, "template", template, "key", cfg.Key)
	return manage.Sandbox{
		ID: sb.SandboxID, Provider: Name, State: manage.StateRunning, Detail: "running", CreatedAt: created,
		Isolation: Isolation, Workdir: p.workdir, EnvdVersion: sb.EnvdVersion,
	}, nil
}

// remember records what reaching sandbox id's envd needs.
func (p *Provider) remember(id, token string, domain *string, envdVersion string) {
	a := access{token: token, envdVersion: envdVersion}
	if domain != nil {
		a.domain = *domain
	}
	p.mu.Lock()
	p.known[id] = a
	p.mu.Unlock()
}

func (p *Provider) forget(id string) {
	p.mu.Lock()
	delete(p.known, id)
	p.mu.Unlock()
}

// Info reports the sandbox's state from GET /sandboxes/{id}: running;
// paused (E2B resumes it through connect, so it is never a loss); or gone
// when the API does not know it (404: killed, deleted, or being killed).
// Any other failure is inconclusive (an error).
func (p *Provider) Info(ctx context.Context, id string) (manage.Sandbox, error) {
	d, err := p.api.Get(ctx, id)
	if IsNotFound(err) {
		p.forget(id)
		return manage.Sandbox{ID: id, Provider: Name, State: manage.StateGone, Detail: "not found"}, nil
	}
	if err != nil {
		return manage.Sandbox{}, err
	}
	p.remember(id, d.EnvdAccessToken, d.Domain, d.EnvdVersion)
	sb := p.describe(d.ListedSandbox)
	if sb.State == "" {
		return manage.Sandbox{}, fmt.Errorf("e2b api: sandbox %s is in state %q, which this version does not know", id, d.State)
	}
	return sb, nil
}

// describe turns the API's view of a sandbox into a Sandbox; State is ""
// for a state it does not know.
func (p *Provider) describe(s e2bapi.ListedSandbox) manage.Sandbox {
	sb := manage.Sandbox{
		ID: s.SandboxID, Provider: Name, CreatedAt: s.StartedAt, Isolation: Isolation,
		Workdir: p.workdir, EnvdVersion: s.EnvdVersion, Detail: string(s.State),
	}
	switch s.State {
	case e2bapi.StateRunning:
		sb.State = manage.StateRunning
	case e2bapi.StatePaused:
		sb.State = manage.StatePaused
	}
	return sb
}

// Endpoint says how to reach the sandbox's envd, as E2B's SDKs do: at
// Config.SandboxURL when set; for E2B's own domains through the shared host
// https://sandbox.<domain>; otherwise at https://49983-<id>.<domain>, where
// domain is the sandbox's as the API reports it, else Config.Domain. Every
// request carries E2b-Sandbox-Id and E2b-Sandbox-Port, and X-Access-Token
// when the API minted one.
func (p *Provider) Endpoint(ctx context.Context, id string) (manage.Endpoint, error) {
	p.mu.Lock()
	a, ok := p.known[id]
	p.mu.Unlock()
	if !ok {
		d, err := p.api.Get(ctx, id)
		if err != nil {
			return manage.Endpoint{}, err
		}
		p.remember(id, d.EnvdAccessToken, d.Domain, d.EnvdVersion)
		a = access{token: d.EnvdAccessToken, envdVersion: d.EnvdVersion}
		if d.Domain != nil {
			a.domain = *d.Domain
		}
	}
	return manage.Endpoint{
		URL: p.envdURL(id, a.domain), AccessToken: a.token, RoutingID: id, RoutingPort: e2bapi.EnvdPort,
		EnvdVersion: a.envdVersion, ClientOptions: p.envdOpts,
	}, nil
}

// envdURL is the base URL of sandbox id's envd, whose domain the API gave
// as sandboxDomain ("" when it gave none).
func (p *Provider) envdURL(id, sandboxDomain string) string {
	if p.sandboxURL != "" {
		return p.sandboxURL
	}
	domain := sandboxDomain
	if domain == "" {
		domain = p.domain
	}
	if sharedHostDomains[domain] {
		return "https://sandbox." + domain
	}
	return fmt.Sprintf("https://%d-%s.%s", e2bapi.EnvdPort, id, domain)
}

// Pause snapshots the sandbox (memory and files). Pausing a paused one
// (409) is a no-op.
func (p *Provider) Pause(ctx context.Context, id string) error {
	_, err := p.api.Pause(ctx, id)
	return err
}

// Resume brings a paused sandbox back through connect, which also extends
// a running one's time to live (a no-op otherwise).
func (p *Provider) Resume(ctx context.Context, id string) error {
	sb, _, err := p.api.Connect(ctx, id, p.lifetime)
	if err != nil {
		return err
	}
	p.remember(id, sb.EnvdAccessToken, sb.Domain, sb.EnvdVersion)
	return nil
}

// Kill destroys the sandbox and its snapshot. Killing a gone one (404) is
// a no-op.
func (p *Provider) Kill(ctx context.Context, id string) error {
	_, err := p.api.Kill(ctx, id)
	if err == nil {
		p.forget(id)
	}
	return err
}

// List returns the sandboxes, running and paused, that carry this
// provider's owner label.
func (p *Provider) List(ctx context.Context) ([]manage.Sandbox, error) {
	all, err := p.api.List(ctx, ListOptions{Metadata: map[string]string{MetaOwner: p.owner}})
	if err != nil {
		return nil, err
	}
	out := make([]manage.Sandbox, 0, len(all))
	for _, s := range all {
		if s.Metadata[MetaOwner] != p.owner {
			continue
		}
		if sb := p.describe(s); sb.State != "" {
			out = append(out, sb)
		}
	}
	return out, nil
}

// KeepAlive extends the sandbox's time to live to the provider's lifetime
// from now (POST /refreshes, which never shortens it).
func (p *Provider) KeepAlive(ctx context.Context, id string) error {
	return p.api.Refresh(ctx, id, p.lifetime)
}

// KeepAliveInterval is a third of the lifetime, so two refreshes may fail
// before a busy sandbox's time runs out.
func (p *Provider) KeepAliveInterval() time.Duration { return p.lifetime / 3 }

//go:build linux

package e2b_test

// A test-only stand-in for an E2B-compatible management API and its envd
// proxy (shared-host routing on E2b-Sandbox-Id/E2b-Sandbox-Port), backed by
// the real local provider (bubblewrap sandboxes, the real envd). The
// lifecycle tests reach it only through its base URLs (managementAPI), so
// they can point at `sandbox-mcp manage serve` instead once it exists.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
	"github.com/sandbox-mcp/sandbox-mcp/manage/local"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testAPI is where a management API under test is: base URLs and a key.
type testAPI struct {
	APIURL, SandboxURL, APIKey string
	// Workdir is the workspace root of its sandboxes.
	Workdir string
}

// managementAPI starts an E2B-compatible management API for the test and
// returns its URLs. It is the fake below; a later version can start
// `sandbox-mcp manage serve` here instead.
func managementAPI(t *testing.T) testAPI {
	t.Helper()
	f := newFakeAPI(t)
	return testAPI{APIURL: f.srv.URL, SandboxURL: f.srv.URL, APIKey: f.key, Workdir: "/workspace"}
}

// fakeAPI is the fake management API.
type fakeAPI struct {
	t   *testing.T
	key string
	lp  *local.Provider
	srv *httptest.Server

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
}

type fakeSandbox struct {
	id         string
	template   string
	token      string
	metadata   map[string]string
	autoPause  bool
	autoResume bool
	started    time.Time
	end        time.Time
	timer      *time.Timer
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	testenv.RequireRoot(t)
	// Short, and searchable by the unprivileged user bwrap runs as.
	dir, err := os.MkdirTemp("", "e2bt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	lp, err := local.New(context.Background(), local.Config{StateDir: dir, Isolation: "bwrap", Logger: quiet})
	if err != nil {
		testenv.Missing(t, "bubblewrap sandboxes do not work here: %v", err)
	}
	t.Cleanup(func() { _ = lp.Close(context.Background()) })
	f := &fakeAPI{t: t, key: "e2b_" + randomHex(20), lp: lp, sandboxes: map[string]*fakeSandbox{}}
	f.srv = httptest.NewServer(f)
	t.Cleanup(func() {
		f.srv.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, sb := range f.sandboxes {
			if sb.timer != nil {
				sb.timer.Stop()
			}
		}
	})
	return f
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e2bapi.Error{Code: int32(status), Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get(e2bapi.HeaderSandboxID); id != "" {
		f.proxy(w, r, id)
		return
	}
	if r.Header.Get(e2bapi.HeaderAPIKey) != f.key {
		apiError(w, http.StatusUnauthorized, "Invalid API key")
		return
	}
	ctx := r.Context()
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/sandboxes":
		f.create(ctx, w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v2/sandboxes":
		f.list(ctx, w, r)
	case len(parts) >= 2 && parts[0] == "sandboxes":
		id := parts[1]
		f.mu.Lock()
		sb := f.sandboxes[id]
		f.mu.Unlock()
		if sb == nil {
			apiError(w, http.StatusNotFound, e2bapi.NotFoundMessage(id))
			return
		}
		op := ""
		if len(parts) == 3 {
			op = parts[2]
		}
		f.sandboxOp(ctx, w, r, sb, r.Method+" "+op)
	default:
		apiError(w, http.StatusNotFound, "no such path")
	}
}

func (f *fakeAPI) create(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	var req e2bapi.NewSandbox
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.TemplateID == "" {
		apiError(w, http.StatusBadRequest, "bad body")
		return
	}
	cfg := manage.SandboxConfig{Key: req.Metadata["sandbox-mcp.key"], Env: req.EnvVars, Network: req.AllowInternet != nil && *req.AllowInternet}
	lsb, err := f.lp.Create(ctx, cfg)
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	sb := &fakeSandbox{
		id: lsb.ID, template: req.TemplateID, metadata: req.Metadata, started: time.Now().UTC(),
		autoPause: req.AutoPause != nil && *req.AutoPause, autoResume: req.AutoResume != nil && req.AutoResume.Enabled,
	}
	if req.Secure != nil && *req.Secure {
		sb.token = randomHex(32)
	}
	timeout := req.Timeout
	if timeout == 0 {
		timeout = 15
	}
	f.mu.Lock()
	f.sandboxes[sb.id] = sb
	f.setEndLocked(sb, time.Duration(timeout)*time.Second, true)
	f.mu.Unlock()
	writeJSON(w, http.StatusCreated, e2bapi.Sandbox{TemplateID: sb.template, SandboxID: sb.id, ClientID: "fake", EnvdVersion: lsb.EnvdVersion, EnvdAccessToken: sb.token})
}

// setEndLocked makes sb end d from now (shorten: also earlier than now set).
// At the end it is paused (autoPause) or killed, as E2B's evictor does.
func (f *fakeAPI) setEndLocked(sb *fakeSandbox, d time.Duration, shorten bool) {
	end := time.Now().Add(d)
	if !shorten && end.Before(sb.end) {
		return
	}
	sb.end = end
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.timer = time.AfterFunc(d, func() { f.expire(sb.id) })
}

// expire is the end of sb's time to live.
func (f *fakeAPI) expire(id string) {
	f.mu.Lock()
	sb := f.sandboxes[id]
	if sb == nil || time.Now().Before(sb.end) {
		f.mu.Unlock()
		return
	}
	pause := sb.autoPause
	if !pause {
		delete(f.sandboxes, id)
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if pause {
		_ = f.lp.Pause(ctx, id)
	} else {
		_ = f.lp.Kill(ctx, id)
	}
}

// state is sb's state from the local provider's; "" when it is gone.
func (f *fakeAPI) state(ctx context.Context, id string) e2bapi.SandboxState {
	info, err := f.lp.Info(ctx, id)
	if err != nil {
		return ""
	}
	switch info.State {
	case manage.StateRunning:
		return e2bapi.StateRunning
	case manage.StatePaused, manage.StateStopped:
		return e2bapi.StatePaused
	}
	return ""
}

func (f *fakeAPI) listed(sb *fakeSandbox, st e2bapi.SandboxState) e2bapi.ListedSandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	return e2bapi.ListedSandbox{
		TemplateID: sb.template, SandboxID: sb.id, ClientID: "fake", StartedAt: sb.started, EndAt: sb.end,
		CPUCount: 1, MemoryMB: 512, DiskSizeMB: 1024, State: st, EnvdVersion: "0.1.0", Metadata: sb.metadata,
	}
}

func (f *fakeAPI) sandboxOp(ctx context.Context, w http.ResponseWriter, r *http.Request, sb *fakeSandbox, op string) {
	st := f.state(ctx, sb.id)
	if st == "" {
		f.mu.Lock()
		delete(f.sandboxes, sb.id)
		f.mu.Unlock()
		apiError(w, http.StatusNotFound, e2bapi.NotFoundMessage(sb.id))
		return
	}
	var body struct {
		Timeout  int32 `json:"timeout"`
		Duration int32 `json:"duration"`
	}
	if r.Body != nil {
		_ = json.NewDecoder(r.Body).Decode(&body)
	}
	switch op {
	case "GET ":
		d := e2bapi.SandboxDetail{ListedSandbox: f.listed(sb, st), EnvdAccessToken: sb.token}
		onTimeout := "kill"
		if sb.autoPause {
			onTimeout = "pause"
		}
		d.Lifecycle = &e2bapi.Lifecycle{AutoResume: sb.autoResume, OnTimeout: onTimeout}
		writeJSON(w, http.StatusOK, d)
	case "DELETE ":
		f.mu.Lock()
		delete(f.sandboxes, sb.id)
		if sb.timer != nil {
			sb.timer.Stop()
		}
		f.mu.Unlock()
		if err := f.lp.Kill(ctx, sb.id); err != nil {
			apiError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case "POST pause":
		if st == e2bapi.StatePaused {
			apiError(w, http.StatusConflict, "Sandbox \""+sb.id+"\" is already paused")
			return
		}
		if err := f.lp.Pause(ctx, sb.id); err != nil {
			apiError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case "POST connect":
		status := http.StatusOK
		if st == e2bapi.StatePaused {
			if err := f.lp.Resume(ctx, sb.id); err != nil {
				apiError(w, http.StatusInternalServerError, err.Error())
				return
			}
			status = http.StatusCreated
		}
		f.mu.Lock()
		f.setEndLocked(sb, time.Duration(body.Timeout)*time.Second, false)
		f.mu.Unlock()
		writeJSON(w, status, e2bapi.Sandbox{TemplateID: sb.template, SandboxID: sb.id, ClientID: "fake", EnvdVersion: "0.1.0", EnvdAccessToken: sb.token})
	case "POST timeout", "POST refreshes":
		if st != e2bapi.StateRunning {
			apiError(w, http.StatusConflict, "Sandbox \""+sb.id+"\" is not running")
			return
		}
		f.mu.Lock()
		if op == "POST timeout" {
			f.setEndLocked(sb, time.Duration(body.Timeout)*time.Second, true)
		} else {
			f.setEndLocked(sb, time.Duration(max(body.Duration, 15))*time.Second, false)
		}
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, http.StatusNotFound, "no such path")
	}
}

func (f *fakeAPI) list(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	want, _ := url.ParseQuery(q.Get("metadata"))
	states := strings.Split(q.Get("state"), ",")
	f.mu.Lock()
	all := make([]*fakeSandbox, 0, len(f.sandboxes))
	for _, sb := range f.sandboxes {
		all = append(all, sb)
	}
	f.mu.Unlock()
	slices.SortFunc(all, func(a, b *fakeSandbox) int { return strings.Compare(a.id, b.id) })
	var out []e2bapi.ListedSandbox
	for _, sb := range all {
		st := f.state(ctx, sb.id)
		if st == "" || (q.Get("state") != "" && !slices.Contains(states, string(st))) {
			continue
		}
		match := true
		for k := range want {
			if sb.metadata[k] != want.Get(k) {
				match = false
			}
		}
		if match {
			out = append(out, f.listed(sb, st))
		}
	}
	start, _ := strconv.Atoi(q.Get("nextToken"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		limit = 100
	}
	out = out[min(start, len(out)):]
	if len(out) > limit {
		out = out[:limit]
		w.Header().Set(e2bapi.HeaderNextToken, strconv.Itoa(start+limit))
	}
	if out == nil {
		out = []e2bapi.ListedSandbox{}
	}
	writeJSON(w, http.StatusOK, out)
}

// proxy forwards an envd request to sandbox id's envd, as E2B's proxy does:
// a gone sandbox, or a paused one without auto-resume, is a 502 with E2B's
// JSON body; a paused one with auto-resume is resumed first.
func (f *fakeAPI) proxy(w http.ResponseWriter, r *http.Request, id string) {
	notFound := func() {
		writeJSON(w, http.StatusBadGateway, e2bapi.ProxyError{SandboxID: id, Message: e2bapi.ProxyNotFoundMessage, Code: http.StatusBadGateway})
	}
	f.mu.Lock()
	sb := f.sandboxes[id]
	f.mu.Unlock()
	if sb == nil || r.Header.Get(e2bapi.HeaderSandboxPort) != strconv.Itoa(e2bapi.EnvdPort) {
		notFound()
		return
	}
	if sb.token != "" && r.Header.Get(e2bapi.HeaderAccessToken) != sb.token {
		apiError(w, http.StatusUnauthorized, "invalid access token")
		return
	}
	switch f.state(r.Context(), id) {
	case "":
		notFound()
		return
	case e2bapi.StatePaused:
		if !sb.autoResume || f.lp.Resume(r.Context(), id) != nil {
			notFound()
			return
		}
	}
	ep, err := f.lp.Endpoint(r.Context(), id)
	if err != nil {
		notFound()
		return
	}
	sock := strings.TrimPrefix(ep.URL, "unix:")
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "envd"
			pr.Out.Header.Del(e2bapi.HeaderAccessToken)
		},
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
		FlushInterval: -1,
		ErrorHandler:  func(w http.ResponseWriter, _ *http.Request, _ error) { notFound() },
	}
	rp.ServeHTTP(w, r)
}

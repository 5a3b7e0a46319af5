package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/manage/e2bapi"
)

const testKey = "e2b_0123456789abcdef"

// faultServer is an httptest server of the management API whose answers a
// test scripts; it counts the requests it gets.
type faultServer struct {
	*httptest.Server
	requests atomic.Int64
}

// newFaultServer serves handle, after checking the API key (401 with E2B's
// body for any other).
func newFaultServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int64)) *faultServer {
	t.Helper()
	fs := &faultServer{}
	fs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := fs.requests.Add(1)
		if r.Header.Get(e2bapi.HeaderAPIKey) != testKey {
			writeError(w, http.StatusUnauthorized, "Invalid API key, it must start with 'e2b_' prefix")
			return
		}
		handle(w, r, n)
	}))
	t.Cleanup(fs.Close)
	return fs
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e2bapi.Error{Code: int32(status), Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// waits records the waits a client's retries asked for, without waiting.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.d...)
}

// newTestClient is a client of url with the test key, whose retries do not
// wait (their waits are recorded in the returned waits).
func newTestClient(t *testing.T, url string, opts ...Option) (*Client, *waits) {
	t.Helper()
	c, err := NewClient(url, testKey, opts...)
	if err != nil {
		t.Fatal(err)
	}
	w := &waits{}
	c.sleep = w.sleep
	return c, w
}

func TestGetNotFound(t *testing.T) {
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		writeError(w, http.StatusNotFound, e2bapi.NotFoundMessage("abc"))
	})
	c, _ := newTestClient(t, fs.URL)
	_, err := c.Get(t.Context(), "abc")
	if !IsNotFound(err) || IsConflict(err) {
		t.Fatalf("Get = %v, want a not-found error", err)
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.Body.Message != e2bapi.NotFoundMessage("abc") || !strings.Contains(err.Error(), "doesn't exist") {
		t.Fatalf("error %v does not carry E2B's body", err)
	}
	if n := fs.requests.Load(); n != 1 {
		t.Fatalf("a 404 was sent %d times, want once", n)
	}
}

func TestPauseConflictIsSuccess(t *testing.T) {
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.Method != http.MethodPost || r.URL.Path != "/sandboxes/abc/pause" {
			t.Errorf("%s %s, want POST /sandboxes/abc/pause", r.Method, r.URL.Path)
		}
		writeError(w, http.StatusConflict, "Sandbox \"abc\" is already paused")
	})
	c, _ := newTestClient(t, fs.URL)
	paused, err := c.Pause(t.Context(), "abc")
	if err != nil || paused {
		t.Fatalf("Pause of a paused sandbox = %v, %v; want false, nil", paused, err)
	}
}

func TestKillNotFoundIsSuccess(t *testing.T) {
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.Method != http.MethodDelete {
			t.Errorf("method %s, want DELETE", r.Method)
		}
		writeError(w, http.StatusNotFound, e2bapi.NotFoundMessage("abc"))
	})
	c, _ := newTestClient(t, fs.URL)
	existed, err := c.Kill(t.Context(), "abc")
	if err != nil || existed {
		t.Fatalf("Kill of a gone sandbox = %v, %v; want false, nil", existed, err)
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			w.Header().Set("Retry-After", "7")
			writeError(w, http.StatusTooManyRequests, "rate limited")
			return
		}
		writeJSON(w, http.StatusOK, e2bapi.SandboxDetail{ListedSandbox: e2bapi.ListedSandbox{SandboxID: "abc", State: e2bapi.StateRunning}})
	})
	c, w := newTestClient(t, fs.URL, WithBackoff(time.Millisecond))
	sb, err := c.Get(t.Context(), "abc")
	if err != nil || sb.State != e2bapi.StateRunning {
		t.Fatalf("Get after a 429 = %+v, %v", sb, err)
	}
	if got := w.all(); len(got) != 1 || got[0] != 7*time.Second {
		t.Fatalf("waits %v, want one of 7s (the Retry-After)", got)
	}
}

func TestUnavailableUntilRetriesSpent(t *testing.T) {
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		writeError(w, http.StatusServiceUnavailable, "try later")
	})
	c, w := newTestClient(t, fs.URL, WithRetries(3))
	err := c.SetTimeout(t.Context(), "abc", time.Minute)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Attempts != 4 {
		t.Fatalf("SetTimeout against a 503 = %v, want a 503 error after 4 attempts", err)
	}
	for _, want := range []string{"503", "try later", "after 4 attempts", "set the timeout of sandbox abc"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if n := fs.requests.Load(); n != 4 {
		t.Fatalf("%d requests, want 4", n)
	}
	got := w.all()
	if len(got) != 3 {
		t.Fatalf("waits %v, want 3", got)
	}
	for i, d := range got {
		if hi := DefaultBackoff << i; d < hi/2 || d > hi {
			t.Errorf("wait %d is %v, want between %v and %v (jittered doubling)", i, d, hi/2, hi)
		}
	}
}

func TestSlowServerBounded(t *testing.T) {
	release := make(chan struct{})
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	c, _ := newTestClient(t, fs.URL, WithTimeout(100*time.Millisecond))
	_, err := c.Get(t.Context(), "abc")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 100ms") {
		t.Fatalf("Get of a server that never answers = %v, want a bounded deadline error", err)
	}
}

func TestWrongKeyNotRetried(t *testing.T) {
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		t.Error("a request with a wrong key got past the check")
	})
	c, err := NewClient(fs.URL, "e2b_wrong")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.List(t.Context(), ListOptions{})
	if !IsUnauthorized(err) || !strings.Contains(err.Error(), "E2B_API_KEY") {
		t.Fatalf("List with a wrong key = %v, want a 401 that names E2B_API_KEY", err)
	}
	if n := fs.requests.Load(); n != 1 {
		t.Fatalf("a 401 was sent %d times, want once", n)
	}
}

func TestCreateNeverRetriedOnceSent(t *testing.T) {
	for name, fail := range map[string]func(w http.ResponseWriter){
		"503": func(w http.ResponseWriter) { writeError(w, http.StatusServiceUnavailable, "overloaded") },
		"429": func(w http.ResponseWriter) { writeError(w, http.StatusTooManyRequests, "slow down") },
		"connection cut": func(w http.ResponseWriter) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) { fail(w) })
			c, w := newTestClient(t, fs.URL)
			_, err := c.Create(t.Context(), e2bapi.NewSandbox{TemplateID: "base"})
			if err == nil {
				t.Fatal("Create succeeded")
			}
			if n := fs.requests.Load(); n != 1 || len(w.all()) != 0 {
				t.Fatalf("Create was sent %d times (%d retries), want once", n, len(w.all()))
			}
		})
	}
}

// TestCreateRetriedWhenNeverSent checks that a create whose connection could
// not even be opened is retried: it cannot have reached the server.
func TestCreateRetriedWhenNeverSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens: connections are refused
	c, w := newTestClient(t, url, WithRetries(2))
	_, err = c.Create(t.Context(), e2bapi.NewSandbox{TemplateID: "base"})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the API (after 3 attempts)") {
		t.Fatalf("Create against a closed port = %v", err)
	}
	if len(w.all()) != 2 {
		t.Fatalf("%d retries, want 2", len(w.all()))
	}
}

// TestIdempotentRetriedAfterCut checks that an idempotent call whose
// connection broke off is sent again.
func TestIdempotentRetriedAfterCut(t *testing.T) {
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	c, w := newTestClient(t, fs.URL)
	if err := c.Refresh(t.Context(), "abc", time.Minute); err != nil {
		t.Fatal(err)
	}
	if fs.requests.Load() != 2 || len(w.all()) != 1 {
		t.Fatalf("%d requests, %d retries; want 2 and 1", fs.requests.Load(), len(w.all()))
	}
}

func TestListPagesAndFilters(t *testing.T) {
	pages := map[string][]string{"": {"a", "b"}, "t1": {"c"}, "t2": {"d"}}
	next := map[string]string{"": "t1", "t1": "t2"}
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		q := r.URL.Query()
		if r.URL.Path != "/v2/sandboxes" || q.Get("state") != "running,paused" || q.Get("metadata") != "owner=me&team=x+y" || q.Get("limit") != "2" {
			t.Errorf("list request %s", r.URL)
		}
		tok := q.Get("nextToken")
		var out []e2bapi.ListedSandbox
		for _, id := range pages[tok] {
			out = append(out, e2bapi.ListedSandbox{SandboxID: id, State: e2bapi.StatePaused})
		}
		if n := next[tok]; n != "" {
			w.Header().Set(e2bapi.HeaderNextToken, n)
		}
		writeJSON(w, http.StatusOK, out)
	})
	c, _ := newTestClient(t, fs.URL)
	got, err := c.List(t.Context(), ListOptions{
		States:   []e2bapi.SandboxState{e2bapi.StateRunning, e2bapi.StatePaused},
		Metadata: map[string]string{"owner": "me", "team": "x y"},
		PageSize: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range got {
		ids = append(ids, s.SandboxID)
	}
	if strings.Join(ids, ",") != "a,b,c,d" {
		t.Fatalf("listed %v, want a,b,c,d across three pages", ids)
	}
}

func TestConnectResumedOrRunning(t *testing.T) {
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		var body e2bapi.ConnectSandbox
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Timeout != 90 {
			t.Errorf("connect body %+v, %v; want timeout 90", body, err)
		}
		status := http.StatusOK
		if strings.Contains(r.URL.Path, "paused") {
			status = http.StatusCreated
		}
		writeJSON(w, status, e2bapi.Sandbox{SandboxID: "x", EnvdAccessToken: "tok"})
	})
	c, _ := newTestClient(t, fs.URL)
	for id, want := range map[string]bool{"paused1": true, "running1": false} {
		sb, resumed, err := c.Connect(t.Context(), id, 90*time.Second)
		if err != nil || resumed != want || sb.EnvdAccessToken != "tok" {
			t.Errorf("Connect(%s) = %+v, %v, %v; want resumed %v", id, sb, resumed, err, want)
		}
	}
}

func TestNewClientRefusesPlainRemoteHTTP(t *testing.T) {
	if _, err := NewClient("http://api.example.com", testKey); err == nil {
		t.Error("plain http to a remote host accepted")
	}
	if _, err := NewClient("https://api.e2b.app", ""); err == nil || !strings.Contains(err.Error(), "E2B_API_KEY") {
		t.Errorf("no key: %v", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"3": 3 * time.Second, "": 0, "-1": 0, "soon": 0,
		now.Add(10 * time.Second).Format(http.TimeFormat): 10 * time.Second,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestRetryAfterBeyondBudget checks that a Retry-After longer than what is
// left of the call's timeout ends the call at once with the 429.
func TestRetryAfterBeyondBudget(t *testing.T) {
	fs := newFaultServer(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		w.Header().Set("Retry-After", "120")
		writeError(w, http.StatusTooManyRequests, "rate limited")
	})
	c, w := newTestClient(t, fs.URL, WithTimeout(5*time.Second))
	_, err := c.Get(t.Context(), "abc")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests || ae.RetryAfter != 120*time.Second {
		t.Fatalf("Get = %v, want the 429 with its Retry-After", err)
	}
	if fs.requests.Load() != 1 || len(w.all()) != 0 {
		t.Fatalf("%d requests, %d waits; want 1 and none", fs.requests.Load(), len(w.all()))
	}
}

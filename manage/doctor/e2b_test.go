package doctor

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestE2BCheck checks the e2b api verdicts: no key, a key the API accepts,
// one it refuses, and an API that cannot be reached.
func TestE2BCheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != "e2b_good" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":401,"message":"Invalid API key"}`))
			return
		}
		_, _ = w.Write([]byte(`[]`))
	}))
	defer srv.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	for _, tc := range []struct {
		name     string
		cfg      Config
		want     Status
		fixHas   string
		detailAs string
	}{
		{"no key, other provider", Config{Provider: "local"}, Skip, "", "needed only for --provider e2b"},
		{"no key, e2b", Config{Provider: "e2b"}, Fail, "E2B_API_KEY", "no API key"},
		{"good key", Config{Provider: "e2b", E2BAPIKey: "e2b_good", E2BAPIURL: srv.URL}, OK, "", "accepts the key"},
		{"wrong key, e2b", Config{Provider: "e2b", E2BAPIKey: "e2b_bad", E2BAPIURL: srv.URL}, Fail, "E2B_API_KEY", "refuses the key"},
		{"wrong key, other provider", Config{Provider: "local", E2BAPIKey: "e2b_bad", E2BAPIURL: srv.URL}, Warn, "E2B_API_KEY", "refuses the key"},
		{"unreachable", Config{Provider: "e2b", E2BAPIKey: "e2b_good", E2BAPIURL: dead.URL}, Fail, "--e2b-api-url", "could not be used"},
	} {
		c := e2bCheck(t.Context(), tc.cfg)
		if c.Status != tc.want || !strings.Contains(c.Fix, tc.fixHas) || !strings.Contains(c.Detail, tc.detailAs) {
			t.Errorf("%s: %+v; want %s, detail with %q, fix with %q", tc.name, c, tc.want, tc.detailAs, tc.fixHas)
		}
		if strings.Contains(c.Detail+c.Fix, "e2b_good") || strings.Contains(c.Detail+c.Fix, "e2b_bad") {
			t.Errorf("%s: the key is printed: %+v", tc.name, c)
		}
	}
}

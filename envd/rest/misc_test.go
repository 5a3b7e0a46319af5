//go:build linux

package rest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/rest"
)

func TestHealth(t *testing.T) {
	e := newEnv(t)
	res := e.get(t, e.url("/health"))
	wantStatus(t, res, http.StatusNoContent)
	if len(res.body) != 0 || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("body %q, Cache-Control %q", res.body, res.Header.Get("Cache-Control"))
	}
	res = e.post(t, e.url("/health"), "text/plain", strings.NewReader(""))
	wantError(t, res, http.StatusMethodNotAllowed, "POST")
	if res.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("Allow %q", res.Header.Get("Allow"))
	}
}

func TestUnknownPath(t *testing.T) {
	e := newEnv(t)
	wantError(t, e.get(t, e.url("/nope")), http.StatusNotFound, "/nope")
	req, _ := http.NewRequest(http.MethodDelete, e.url("/files"), nil)
	wantError(t, e.do(t, req), http.StatusMethodNotAllowed, "DELETE")
}

func TestEnvs(t *testing.T) {
	env := map[string]string{"FOO": "bar", "EMPTY": ""}
	e := newEnv(t, func(o *rest.Options) { o.Env = env })
	res := e.get(t, e.url("/envs"))
	wantStatus(t, res, http.StatusOK)
	var got map[string]string
	if err := json.Unmarshal(res.body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["FOO"] != "bar" || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("envs %v, Cache-Control %q", got, res.Header.Get("Cache-Control"))
	}

	empty := newEnv(t)
	if res := empty.get(t, empty.url("/envs")); strings.TrimSpace(string(res.body)) != "{}" {
		t.Fatalf("envs without Env: %s", res.body)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	for range 2 { // the second call samples CPU since the first
		res := e.get(t, e.url("/metrics"))
		wantStatus(t, res, http.StatusOK)
		var m rest.Metrics
		if err := json.Unmarshal(res.body, &m); err != nil {
			t.Fatal(err)
		}
		var raw map[string]json.RawMessage
		_ = json.Unmarshal(res.body, &raw)
		for _, k := range []string{"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "mem_cache", "mem_total_mib", "mem_used_mib", "disk_used", "disk_total"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("field %s missing from %s", k, res.body)
			}
		}
		if d := time.Since(time.Unix(m.Timestamp, 0)); d < -time.Minute || d > time.Minute {
			t.Errorf("ts %d is not now", m.Timestamp)
		}
		if m.CPUCount < 1 || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
			t.Errorf("cpu %d / %.2f%%", m.CPUCount, m.CPUUsedPct)
		}
		if m.MemTotal == 0 || m.MemUsed > m.MemTotal || m.MemTotalMiB != m.MemTotal>>20 || m.MemUsedMiB != m.MemUsed>>20 {
			t.Errorf("memory %+v", m)
		}
		if m.DiskTotal == 0 || m.DiskUsed > m.DiskTotal {
			t.Errorf("disk %d / %d", m.DiskUsed, m.DiskTotal)
		}
	}
}

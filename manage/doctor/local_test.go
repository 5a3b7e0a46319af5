package doctor

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
)

// TestLocalUnavailable checks the local provider's verdict outside Linux:
// a failure with a fix when it is the provider configured, else a skip.
func TestLocalUnavailable(t *testing.T) {
	for _, tc := range []struct {
		provider string
		want     Status
	}{{"", Fail}, {"local", Fail}, {"docker", Skip}} {
		c := localUnavailable(Config{Provider: tc.provider}, "darwin", "arm64")
		if c.Status != tc.want {
			t.Errorf("--provider %q: status %s, want %s", tc.provider, c.Status, tc.want)
		}
		if !strings.Contains(c.Detail, "the local provider needs Linux") || !strings.Contains(c.Detail, "darwin/arm64") {
			t.Errorf("--provider %q: detail %q", tc.provider, c.Detail)
		}
		if tc.want == Fail && !strings.Contains(c.Fix, "--provider docker") {
			t.Errorf("--provider %q: fix %q names no alternative", tc.provider, c.Fix)
		}
	}
}

func TestLinuxEnvdCheck(t *testing.T) {
	if c := linuxEnvdCheck(nil); c.Status != Warn || c.Fix == "" {
		t.Errorf("none embedded: %+v", c)
	}
	e := &envdbin.Envd{Name: envdbin.Name("amd64"), SHA256: strings.Repeat("ab", 32)}
	if c := linuxEnvdCheck([]*envdbin.Envd{e}); c.Status != OK || !strings.Contains(c.Detail, "sandbox-envd-linux-amd64 (sha256 abababababab)") {
		t.Errorf("one embedded: %+v", c)
	}
}

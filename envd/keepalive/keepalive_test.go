package keepalive

import (
	"net/http"
	"testing"
	"time"
)

func TestInterval(t *testing.T) {
	for header, want := range map[string]time.Duration{
		"":    Default,
		"1":   time.Second,
		"30":  30 * time.Second,
		" 5":  Default,
		"0":   Default,
		"-3":  Default,
		"abc": Default,
		"1.5": Default,
	} {
		h := http.Header{}
		if header != "" {
			h.Set(Header, header)
		}
		if got := Interval(h); got != want {
			t.Errorf("Interval(%s: %q) = %v, want %v", Header, header, got, want)
		}
	}
	if got := Interval(nil); got != Default {
		t.Errorf("Interval(nil) = %v, want %v", got, Default)
	}
}

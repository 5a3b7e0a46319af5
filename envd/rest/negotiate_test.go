//go:build linux

package rest

import "testing"

func TestNegotiateEncoding(t *testing.T) {
	cases := []struct {
		header []string
		want   string // "" means 406
	}{
		{nil, "identity"},
		{[]string{""}, "identity"},
		{[]string{"gzip"}, "gzip"},
		{[]string{"GZIP"}, "gzip"},
		{[]string{"x-gzip"}, "gzip"},
		{[]string{"gzip, deflate, br"}, "gzip"},
		{[]string{"br;q=1, gzip;q=0.5"}, "gzip"},
		{[]string{"gzip;q=0.5, identity"}, "identity"},
		{[]string{"gzip;q=0.5, identity;q=0.5"}, "gzip"},
		{[]string{"gzip;q=0"}, "identity"},
		{[]string{"*"}, "identity"},
		{[]string{"*;q=0.3, identity;q=0"}, "gzip"},
		{[]string{"br"}, "identity"},
		{[]string{"br", "gzip"}, "gzip"}, // repeated header lines
		{[]string{"identity;q=0"}, ""},
		{[]string{"br, identity;q=0"}, ""},
		{[]string{"*;q=0"}, ""},
		{[]string{"gzip;q=0, *;q=0"}, ""},
		{[]string{"gzip;q=bogus"}, "identity"},
		{[]string{"gzip; q=0.8 ; foo=bar"}, "gzip"},
	}
	for _, tc := range cases {
		got, ok := negotiateEncoding(tc.header)
		if !ok {
			got = ""
		}
		if got != tc.want {
			t.Errorf("negotiateEncoding(%q) = %q, want %q", tc.header, got, tc.want)
		}
	}
}

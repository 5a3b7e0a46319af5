package search

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"
)

// TestAppendString: the hand-written encoder writes strings exactly as
// encoding/json does without HTML escaping.
func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s`, "<a>&", "\n\r\t\b\f\x00\x1f\x7f", "süß ✓", "\u2028\u2029", "bad \xff\xfe utf8", "\xe2\x82"} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := string(appendString(nil, s)) + "\n"; got != want.String() {
			t.Errorf("%q: got %s want %s", s, got, want.String())
		}
		if got := string(appendString(nil, []byte(s))) + "\n"; got != want.String() {
			t.Errorf("%q as bytes: got %s want %s", s, got, want.String())
		}
	}
}

// TestRequiredLiteral: the literal prefilter is taken only where every
// match contains it.
func TestRequiredLiteral(t *testing.T) {
	for _, tc := range []struct {
		pattern           string
		literal, fold     bool
		want              string
		wantFold, complet bool
	}{
		{"needle", false, false, "needle", false, true},
		{`NEEDLE_\w+`, false, false, "NEEDLE_", false, false},
		{`\w+_MARKER\d`, false, false, "_MARKER", false, false},
		{`handler3\d\(`, false, false, "handler3", false, false},
		{"a.b", true, false, "a.b", false, true},
		{"Hello", false, true, "hello", true, true},
		{"kelvin", false, true, "", false, false}, // K also folds to U+212A
		{"süß", false, true, "", false, false},
		{"foo|bar", false, false, "", false, false},
		{"(foo)?bar", false, false, "bar", false, false},
		{"a\nb", true, false, "", false, false},
	} {
		lit, fold, complete := requiredLiteral(patternSource(tc.pattern, tc.literal, tc.fold))
		if string(lit) != tc.want || fold != tc.wantFold || complete != tc.complet {
			t.Errorf("%q: got %q fold=%v complete=%v", tc.pattern, lit, fold, complete)
		}
	}
}

func TestIndexFold(t *testing.T) {
	for _, tc := range []struct {
		s, lit string
		want   int
	}{
		{"xx HeLLo", "hello", 3}, {"hell", "hello", -1}, {"HELLO", "hello", 0}, {"hhhhello", "hello", 3},
		{"a-1", "-1", 1}, {"", "a", -1}, {"Ab aB", "ab", 0},
	} {
		if got := indexFold([]byte(tc.s), []byte(tc.lit)); got != tc.want {
			t.Errorf("indexFold(%q, %q) = %d, want %d", tc.s, tc.lit, got, tc.want)
		}
		want := -1
		if loc := regexp.MustCompile("(?i)" + regexp.QuoteMeta(tc.lit)).FindStringIndex(tc.s); loc != nil {
			want = loc[0]
		}
		if tc.want != want {
			t.Errorf("case %q/%q disagrees with regexp (%d)", tc.s, tc.lit, want)
		}
	}
}

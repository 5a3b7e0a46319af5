package sandboxid

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for id, want := range map[string]bool{
		"labc123":               true,
		"a":                     true,
		strings.Repeat("z", 64): true,
		"":                      false,
		strings.Repeat("z", 65): false,
		"Labc":                  false,
		"a-b":                   false,
		"a/b":                   false,
		"..":                    false,
		"é":                     false,
	} {
		if got := Valid(id); got != want {
			t.Errorf("Valid(%q) = %v; want %v", id, got, want)
		}
	}
}

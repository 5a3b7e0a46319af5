// Package sandboxid checks sandbox ids the way the local provider and the
// local E2B-compatible server both need: an id that is safe to build a path
// from and that E2B's proxy would route.
package sandboxid

// Valid reports whether id is 1 to 64 lowercase ASCII letters and digits.
func Valid(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

//go:build !linux

package manage

// HalfHostMemory is 0 outside Linux: no provider here sets a default memory
// ceiling from the host's RAM.
func HalfHostMemory() int64 { return 0 }

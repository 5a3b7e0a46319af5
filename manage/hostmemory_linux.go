package manage

import (
	"os"

	"golang.org/x/sys/unix"
)

// HalfHostMemory is half this machine's RAM in bytes, rounded down to
// pages as the kernel stores memory limits, or 0 when it cannot be read:
// the default memory ceiling of a sandbox.
func HalfHostMemory() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	page := int64(os.Getpagesize())
	return int64(si.Totalram) * int64(si.Unit) / 2 / page * page
}

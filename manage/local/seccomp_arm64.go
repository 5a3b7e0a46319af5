//go:build linux

package local

import "golang.org/x/sys/unix"

// seccompArch is the audit architecture the filter's numbers belong to.
const seccompArch = unix.AUDIT_ARCH_AARCH64

// seccompX32Bit is 0: arm64 has no second ABI sharing its numbers (a 32-bit
// arm process reports AUDIT_ARCH_ARM and is refused by the arch check).
const seccompX32Bit = 0

// seccompArchDenied are the denied calls only arm64 has: none.
var seccompArchDenied []uintptr

//go:build linux && !amd64 && !arm64

package local

// seccompArch is 0: there is no system call table for this architecture,
// so bwrap sandboxes run without a seccomp filter (and say so).
const seccompArch = 0

const seccompX32Bit = 0

var seccompArchDenied []uintptr

//go:build !linux

package process

// pendingBytes returns 0: outside Linux the End of an exited process waits
// only for EOF or the grace period, not for bytes left in the pipes.
func pendingBytes(fd uintptr) int { return 0 }

// pipeCapacity returns 0: pipes are not grown outside Linux.
func pipeCapacity(fd uintptr) int { return 0 }

func growPipe(fd uintptr, size int) bool { return false }

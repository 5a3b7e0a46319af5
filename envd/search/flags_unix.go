//go:build unix && !linux

package search

import "syscall"

// openFlags keep a file swapped for a FIFO from blocking the open and a
// symlink from being followed.
const openFlags = syscall.O_NONBLOCK | syscall.O_NOFOLLOW

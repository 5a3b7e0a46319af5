//go:build linux

package local

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// rlimitScript sets the sandbox's rlimits and execs the rest of its
// arguments in place: $0 is RLIMIT_NOFILE, $1 RLIMIT_NPROC (dash and busybox
// call it -p, bash -u). Without a value to raise them beyond the server's
// own, lowering limits needs no privilege.
const rlimitScript = rlimitPrefix + `exec "$@"`

// rlimitPrefix sets the rlimits and shifts them off the arguments.
const rlimitPrefix = `ulimit -n "$0" && { ulimit -p "$1" 2>/dev/null || ulimit -u "$1"; } && shift && `

// rlimitArgs are /bin/sh's arguments to run argv (argv[0] a path, args the
// rest) with spec's rlimits.
func rlimitArgs(spec sandboxSpec, path string, args []string) []string {
	return append([]string{"-c", rlimitScript, strconv.FormatUint(spec.nofile, 10), strconv.FormatInt(spec.pids, 10), path}, args...)
}

// setRlimits applies a sandbox's rlimits to pid, which its processes inherit.
func setRlimits(pid int, spec sandboxSpec) error {
	if err := setRlimit(pid, unix.RLIMIT_NOFILE, spec.nofile); err != nil {
		return err
	}
	return setRlimit(pid, unix.RLIMIT_NPROC, uint64(spec.pids))
}

// setRlimit sets both soft and hard limit of resource on pid. A server that
// may not raise a hard limit (not root) caps the value at its own.
func setRlimit(pid, resource int, value uint64) error {
	if value == 0 {
		return nil
	}
	lim := unix.Rlimit{Cur: value, Max: value}
	err := unix.Prlimit(pid, resource, &lim, nil)
	if errors.Is(err, unix.EPERM) {
		var own unix.Rlimit
		if unix.Getrlimit(resource, &own) == nil && own.Max < value {
			lim = unix.Rlimit{Cur: own.Max, Max: own.Max}
			err = unix.Prlimit(pid, resource, &lim, nil)
		}
	}
	if err != nil {
		return fmt.Errorf("prlimit(%d, %s=%d): %w", pid, rlimitName(resource), value, err)
	}
	return nil
}

func rlimitName(resource int) string {
	switch resource {
	case unix.RLIMIT_NOFILE:
		return "NOFILE"
	case unix.RLIMIT_NPROC:
		return "NPROC"
	}
	return strconv.Itoa(resource)
}

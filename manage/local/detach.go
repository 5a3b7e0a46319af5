//go:build linux

package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// daemonLogFile, in the sandbox directory, is a detached daemon's output
// (envd's and bwrap's), truncated at each start.
const daemonLogFile = "daemon.log"

// daemonLogTail is how much of daemonLogFile a failed start quotes.
const daemonLogTail = 8 << 10

// keeperTail is the end of the keeper's script: run the rest of its
// arguments as a child with descriptor %d, the owner lock, closed, and wait
// for it.
const keeperTail = `"$@" %d>&-`

// detach makes cmd, the command that starts a sandbox's daemon, outlive this
// process, for a sandbox several servers may use (a named workspace's): the
// daemon must not die with whichever of them started it. cmd becomes a
// keeper: /bin/sh in a session of its own, without a parent-death signal,
// which runs the daemon (bwrap, still --die-with-parent, now of the keeper;
// or envd) as its child and holds the sandbox's owner lock until it ends.
// The kernel drops the lock when the keeper dies, so a free owner lock still
// means that nothing runs, whether or not the server that started the
// daemon is alive. The daemon itself never gets the lock's descriptor, so
// nothing inside the sandbox can let go of it. Killing the keeper kills the
// sandbox (bwrap dies with it; an unisolated envd is killed with its
// process tree, as before).
func detach(cmd *exec.Cmd, lock *os.File) {
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, lock)
	tail := fmt.Sprintf(keeperTail, fd)
	if len(cmd.Args) > 2 && cmd.Path == "/bin/sh" && cmd.Args[1] == "-c" && cmd.Args[2] == rlimitScript {
		// The rlimits are set in the keeper, and its child inherits them.
		cmd.Args[2] = rlimitPrefix + tail
	} else {
		// "$0" is the program, "$@" its arguments.
		cmd.Args = append([]string{"/bin/sh", "-c", `"$0" ` + tail, cmd.Path}, cmd.Args[1:]...)
		cmd.Path = "/bin/sh"
	}
	attr := *cmd.SysProcAttr
	attr.Setpgid, attr.Pdeathsig, attr.Setsid = false, 0, true
	cmd.SysProcAttr = &attr
}

// logTail returns the end of a detached daemon's output file in dir.
func logTail(dir string) string {
	f, err := os.Open(filepath.Join(dir, daemonLogFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(info.Size()-daemonLogTail, 0)
	buf := make([]byte, info.Size()-off)
	n, _ := f.ReadAt(buf, off)
	return strings.TrimSpace(string(buf[:n]))
}

// keeperChildren returns the processes started under the keeper pid (bwrap's
// outer process, or envd), for moving them into the sandbox's cgroup: they
// may have been forked before the keeper was moved there.
func keeperChildren(pid int) []int {
	return descendants(pid)[1:]
}

// signalledExit reports the signal a keeper's child died of, which sh
// reports as exit status 128+n.
func signalledExit(ws syscall.WaitStatus) (syscall.Signal, bool) {
	if code := ws.ExitStatus(); code > 128 && code < 128+65 {
		return syscall.Signal(code - 128), true
	}
	return 0, false
}

// processAlive reports whether process pid exists (it may be a later
// process reusing the pid; the detail it is used for is only a hint).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

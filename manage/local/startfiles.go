//go:build linux

package local

// The descriptors a starting daemon inherits, and the commands that start it.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"connectrpc.com/connect"
)

// startFiles are the descriptors a starting daemon inherits and the
// server's ends of its pipes: the listening control socket, the ready pipe
// envd reports on and, under bwrap only, bwrap's --info-fd, --block-fd and
// --args pipes (nil without bwrap).
type startFiles struct {
	listener       *os.File
	readyR, readyW *os.File
	infoR, infoW   *os.File
	blockR, blockW *os.File
	// argsR is bwrap's --args descriptor: bwrap reads it to EOF (no
	// arguments come) before it forks the sandbox's first process, so
	// until argsW is closed bwrap is one process, and the child it forks
	// once moved into the cgroup starts there.
	argsR, argsW *os.File
	// seccomp is the filter bwrap reads from --seccomp (nil without bwrap
	// or without a filter for this architecture).
	seccomp *os.File
}

// openStartFiles makes the control socket in sandbox id's directory dir and
// the ready pipe, and with bwrap also the info and block pipes. On error
// whatever it made is closed again.
func openStartFiles(id, dir string, bwrap bool) (*startFiles, error) {
	var filter *os.File
	if bwrap {
		var err error
		if filter, err = seccompFile(); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: %w", id, err))
		}
	}
	listener, err := listenControlSocket(dir)
	if err != nil {
		if filter != nil {
			_ = filter.Close()
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("start sandbox %s: envd socket: %w", id, err))
	}
	f := &startFiles{listener: listener, seccomp: filter}
	if f.readyR, f.readyW, err = os.Pipe(); err == nil && bwrap {
		if f.infoR, f.infoW, err = os.Pipe(); err == nil {
			if f.blockR, f.blockW, err = os.Pipe(); err == nil {
				f.argsR, f.argsW, err = os.Pipe()
			}
		}
	}
	if err != nil {
		f.close()
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return f, nil
}

// closeChildEnds closes the server's copies of the files the started daemon
// inherited: the listener and the ends of the pipes the daemon uses. The
// server keeps readyR, infoR, blockW and argsW.
func (f *startFiles) closeChildEnds() {
	for _, c := range []*os.File{f.readyW, f.listener, f.infoW, f.blockR, f.argsR, f.seccomp} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// close closes every file; closing one closed already does nothing.
func (f *startFiles) close() {
	for _, c := range []*os.File{f.readyR, f.readyW, f.listener, f.infoR, f.infoW, f.blockR, f.blockW, f.argsR, f.argsW, f.seccomp} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// bwrapCommand is the command that runs sandbox id's envd under bwrap, which
// inherits the ready, info and block pipes, the listener (descriptors 3
// to 6, see bwrapListenFD), the seccomp filter (7, see bwrapSeccompFD) and
// then the args pipe (--args, first of its options). With p.prlimit bwrap runs directly and
// startDaemon sets the rlimits on the sandbox's first process; otherwise sh
// sets them before it execs bwrap.
func (p *Provider) bwrapCommand(id, dir, envdPath string, spec sandboxSpec, f *startFiles) *exec.Cmd {
	var cmd *exec.Cmd
	files := []*os.File{f.readyW, f.infoW, f.blockR, f.listener}
	if f.seccomp != nil {
		files = append(files, f.seccomp)
	}
	// bwrap reads --args where it stands: first, before anything else.
	args := append([]string{"--args", strconv.Itoa(3 + len(files))}, p.bwrapArgs(id, dir, envdPath, spec, f.seccomp != nil)...)
	files = append(files, f.argsR)
	if p.prlimit {
		cmd = exec.Command(p.bwrapPath, args...)
	} else {
		cmd = exec.Command("/bin/sh", rlimitArgs(spec, p.bwrapPath, args)...)
	}
	cmd.ExtraFiles = files
	cmd.Dir = "/"
	cmd.Env = []string{}
	// bwrap --die-with-parent ties the sandbox to this process (see
	// the package comment on threads), or to its keeper when detached.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.credFor(spec)}
	return cmd
}

// unisolatedCommand is the command that runs the envd of the sandbox in dir
// without isolation: sh sets the rlimits and execs envd, which inherits the
// ready pipe and the listener (descriptors 3 and 4, see plainListenFD), runs
// in the workspace and dies with the server (parent-death signal) unless
// detached.
func unisolatedCommand(dir, envdPath string, spec sandboxSpec, f *startFiles) *exec.Cmd {
	ws := filepath.Join(dir, "workspace")
	// Go programs restore the NOFILE soft limit they started with in
	// every child they spawn, so a limit set on envd once it runs would
	// not reach its children: envd must start with it.
	cmd := exec.Command("/bin/sh", rlimitArgs(spec, envdPath, envdArgs(fmt.Sprintf("fd:%d", plainListenFD), ws, filepath.Join(dir, "tmp"), true, spec.env))...)
	cmd.ExtraFiles = []*os.File{f.readyW, f.listener}
	cmd.Dir = ws
	for _, kv := range sandboxEnv(ws, filepath.Join(dir, "tmp")) {
		cmd.Env = append(cmd.Env, kv[0]+"="+kv[1])
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

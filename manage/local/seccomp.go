//go:build linux

package local

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The seccomp filter every bwrap sandbox runs under (bwrap --seccomp), so
// the kernel surface a sandbox reaches is what a Docker container's default
// profile leaves: no mounts, no new namespaces (so no nested user namespaces
// and no bwrap inside), no setns, ptrace, bpf, keyrings, kexec, module
// loading, perf_event_open, open_by_handle_at, userfaultfd, io_uring,
// pivot_root, swap, reboot or clock setting. Denied calls fail with EPERM;
// clone3, whose flags live in memory a filter cannot read, fails with ENOSYS
// so that libc falls back to clone, whose flags it can.
//
// The program is classic BPF over struct seccomp_data
// (nr, arch, instruction pointer, args[6]), built with x/sys/unix's
// SockFilter, which the module already depends on: the filter is a few
// dozen instructions of one fixed shape, so a BPF assembler or a policy
// library would add a dependency without removing any logic. It checks the
// architecture first: a system call made through another ABI (i386 via
// int 0x80 on amd64, or x32, whose numbers have bit 30 set) fails with
// EPERM, since the numbers below are only this architecture's.

// seccomp_data offsets (include/uapi/linux/seccomp.h). Both supported
// architectures are little-endian, so args[0]'s low 32 bits are at 16.
const (
	seccompNrOffset   = 0
	seccompArchOffset = 4
	seccompArg0Low    = 16
)

// namespaceFlags are the clone/unshare flags that make a new namespace.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

// seccompDenied are the system calls that fail with EPERM in every sandbox
// (those of this architecture; seccompArchDenied adds the ones only it has).
var seccompDenied = []uintptr{
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_MOUNT_SETATTR,
	unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	unix.SYS_SETNS,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_KCMP,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_USERFAULTFD,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT,
	unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_SYSLOG, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_NFSSERVCTL,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_VHANGUP,
	unix.SYS_SET_MEMPOLICY, unix.SYS_MBIND, unix.SYS_MOVE_PAGES, unix.SYS_MIGRATE_PAGES,
	unix.SYS_FANOTIFY_INIT,
}

// seccompAction values.
const (
	seccompAllow = unix.SECCOMP_RET_ALLOW
	seccompEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	seccompNoSys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// seccompProgram assembles the filter for this architecture: nil where the
// package has no system call table for it (seccompArch is 0).
func seccompProgram() []unix.SockFilter {
	if seccompArch == 0 {
		return nil
	}
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	ldw := func(off uint32) unix.SockFilter { return stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }
	ret := func(action uint32) unix.SockFilter { return stmt(unix.BPF_RET|unix.BPF_K, action) }
	// jeq jumps to the instruction skip ahead when A == k, else to the next.
	jump := func(op uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}

	denied := append(append([]uintptr(nil), seccompDenied...), seccompArchDenied...)
	var prog []unix.SockFilter
	prog = append(prog,
		ldw(seccompArchOffset),
		jump(unix.BPF_JEQ, seccompArch, 1, 0),
		ret(seccompEPERM),
		ldw(seccompNrOffset),
	)
	if seccompX32Bit != 0 {
		// x32 system calls are the x86_64 numbers with bit 30 set.
		prog = append(prog, jump(unix.BPF_JGE, seccompX32Bit, 0, 1), ret(seccompEPERM))
	}
	// The tail of the program, which the checks below jump to:
	//	allow: ret ALLOW
	//	deny:  ret EPERM
	//	nosys: ret ENOSYS
	//	flags: ld args[0] low; jset namespaceFlags → deny; → allow
	// Each check is one instruction, so the distance to the tail is the
	// number of checks still to come.
	checks := len(denied) + 3 // the denied calls, clone, unshare, clone3
	const (
		allow = 0
		deny  = 1
		nosys = 2
		flags = 3
	)
	target := func(i, label int) uint8 {
		// From check i (0-based) the next instruction is check i+1; the
		// tail starts after the last check.
		return uint8(checks - 1 - i + label)
	}
	for i, nr := range denied {
		prog = append(prog, jump(unix.BPF_JEQ, uint32(nr), target(i, deny), 0))
	}
	i := len(denied)
	prog = append(prog,
		jump(unix.BPF_JEQ, uint32(unix.SYS_CLONE), target(i, flags), 0),
		jump(unix.BPF_JEQ, uint32(unix.SYS_UNSHARE), target(i+1, flags), 0),
		jump(unix.BPF_JEQ, uint32(unix.SYS_CLONE3), target(i+2, nosys), 0),
	)
	prog = append(prog,
		ret(seccompAllow),
		ret(seccompEPERM),
		ret(seccompNoSys),
		ldw(seccompArg0Low),
		jump(unix.BPF_JSET, namespaceFlags, 0, 1),
		ret(seccompEPERM),
		ret(seccompAllow),
	)
	return prog
}

// seccompFilterBytes is the program as bwrap reads it from --seccomp: the
// struct sock_filter array, little-endian: the byte order of every
// architecture that has a filter (amd64, arm64).
func seccompFilterBytes(prog []unix.SockFilter) []byte {
	out := make([]byte, 0, 8*len(prog))
	for _, ins := range prog {
		out = binary.LittleEndian.AppendUint16(out, ins.Code)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.LittleEndian.AppendUint32(out, ins.K)
	}
	return out
}

// seccompFile is a file holding the filter, at offset 0, for a sandbox's
// bwrap to read from --seccomp; nil where there is no filter for this
// architecture. The caller closes it once bwrap started.
func seccompFile() (*os.File, error) {
	prog := seccompProgram()
	if prog == nil {
		return nil, nil
	}
	fd, err := unix.MemfdCreate("sandbox-mcp-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	f := os.NewFile(uintptr(fd), "seccomp")
	if _, err := f.Write(seccompFilterBytes(prog)); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	return f, nil
}

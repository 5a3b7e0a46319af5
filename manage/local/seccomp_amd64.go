//go:build linux

package local

import "golang.org/x/sys/unix"

// seccompArch is the audit architecture the filter's numbers belong to.
const seccompArch = unix.AUDIT_ARCH_X86_64

// seccompX32Bit marks x32 system call numbers, which the filter refuses.
const seccompX32Bit = 0x40000000

// seccompArchDenied are the denied calls only x86_64 has.
var seccompArchDenied = []uintptr{
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE,
	unix.SYS_USELIB, unix.SYS_USTAT, unix.SYS_SYSFS, unix.SYS__SYSCTL,
}

//go:build linux && (amd64 || arm64)

package local

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// runSeccomp evaluates prog on one system call the way the kernel does
// (only the instructions seccompProgram emits) and returns the action.
func runSeccomp(t *testing.T, prog []unix.SockFilter, arch uint32, nr uint32, arg0 uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[seccompNrOffset:], nr)
	binary.LittleEndian.PutUint32(data[seccompArchOffset:], arch)
	binary.LittleEndian.PutUint64(data[seccompArg0Low:], arg0)
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		ins := prog[pc]
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			a = binary.LittleEndian.Uint32(data[ins.K:])
		case unix.BPF_RET | unix.BPF_K:
			return ins.K
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			var taken bool
			switch ins.Code &^ (unix.BPF_JMP | unix.BPF_K) {
			case unix.BPF_JEQ:
				taken = a == ins.K
			case unix.BPF_JGE:
				taken = a >= ins.K
			case unix.BPF_JSET:
				taken = a&ins.K != 0
			}
			if taken {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		default:
			t.Fatalf("instruction %d: unexpected code %#x", pc, ins.Code)
		}
	}
	t.Fatal("the program ran off its end")
	return 0
}

func TestSeccompProgram(t *testing.T) {
	prog := seccompProgram()
	if len(prog) == 0 || len(seccompFilterBytes(prog)) != 8*len(prog) {
		t.Fatalf("program of %d instructions", len(prog))
	}
	for _, tc := range []struct {
		name string
		arch uint32
		nr   uintptr
		arg0 uint64
		want uint32
	}{
		{"read", seccompArch, unix.SYS_READ, 0, seccompAllow},
		{"execve", seccompArch, unix.SYS_EXECVE, 0, seccompAllow},
		{"mount", seccompArch, unix.SYS_MOUNT, 0, seccompEPERM},
		{"umount2", seccompArch, unix.SYS_UMOUNT2, 0, seccompEPERM},
		{"setns", seccompArch, unix.SYS_SETNS, 0, seccompEPERM},
		{"ptrace", seccompArch, unix.SYS_PTRACE, 0, seccompEPERM},
		{"bpf", seccompArch, unix.SYS_BPF, 0, seccompEPERM},
		{"keyctl", seccompArch, unix.SYS_KEYCTL, 0, seccompEPERM},
		{"kexec_load", seccompArch, unix.SYS_KEXEC_LOAD, 0, seccompEPERM},
		{"finit_module", seccompArch, unix.SYS_FINIT_MODULE, 0, seccompEPERM},
		{"perf_event_open", seccompArch, unix.SYS_PERF_EVENT_OPEN, 0, seccompEPERM},
		{"userfaultfd", seccompArch, unix.SYS_USERFAULTFD, 0, seccompEPERM},
		{"pivot_root", seccompArch, unix.SYS_PIVOT_ROOT, 0, seccompEPERM},
		{"reboot", seccompArch, unix.SYS_REBOOT, 0, seccompEPERM},
		{"clone thread", seccompArch, unix.SYS_CLONE, unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND, seccompAllow},
		{"clone newuser", seccompArch, unix.SYS_CLONE, unix.CLONE_NEWUSER | uint64(unix.SIGCHLD), seccompEPERM},
		{"clone newnet", seccompArch, unix.SYS_CLONE, unix.CLONE_NEWNET, seccompEPERM},
		{"unshare files", seccompArch, unix.SYS_UNSHARE, unix.CLONE_FILES, seccompAllow},
		{"unshare newuser", seccompArch, unix.SYS_UNSHARE, unix.CLONE_NEWUSER, seccompEPERM},
		{"unshare newtime", seccompArch, unix.SYS_UNSHARE, unix.CLONE_NEWTIME, seccompEPERM},
		{"unshare newns, high bits set", seccompArch, unix.SYS_UNSHARE, 1<<40 | unix.CLONE_NEWNS, seccompEPERM},
		{"clone3", seccompArch, unix.SYS_CLONE3, 0, seccompNoSys},
		{"another architecture", unix.AUDIT_ARCH_I386, 0, 0, seccompEPERM},
		{"arm on arm64", unix.AUDIT_ARCH_ARM, 0, 0, seccompEPERM},
	} {
		if got := runSeccomp(t, prog, tc.arch, uint32(tc.nr), tc.arg0); got != tc.want {
			t.Errorf("%s: action %#x, want %#x", tc.name, got, tc.want)
		}
	}
	if seccompX32Bit != 0 {
		if got := runSeccomp(t, prog, seccompArch, seccompX32Bit|uint32(unix.SYS_READ), 0); got != seccompEPERM {
			t.Errorf("x32 read: action %#x, want EPERM", got)
		}
	}
}

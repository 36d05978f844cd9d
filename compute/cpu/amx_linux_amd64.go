//go:build amd64 && !purego

package cpu

import (
	"syscall"

	"golang.org/x/sys/cpu"
)

// amxEnable asks Linux for the AMX tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM of XFEATURE_XTILEDATA), once per process, and
// reports whether the CPU has AMX-BF16 and the request was granted.
func amxEnable() bool {
	if !cpu.X86.HasAMXTile || !cpu.X86.HasAMXBF16 || !amxAsmDequant {
		return false
	}
	const archReqXcompPerm, xfeatureXtiledata = 0x1023, 18
	_, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0)
	return e == 0
}

//go:build amd64 && !purego

package cpu

import "unsafe"

// cpuVendor returns the vendor string of CPUID leaf 0 in its three
// registers, in the order the string reads.
func cpuVendor() (ebx, edx, ecx uint32)

// vendor is the CPU's vendor string, such as "GenuineIntel".
func vendor() string {
	var b [12]byte
	r := (*[3]uint32)(unsafe.Pointer(&b))
	r[0], r[1], r[2] = cpuVendor()
	return string(b[:])
}

package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// This file binds the CUDA driver API (libcuda.so.1) at run time through
// purego: no cgo and no CUDA headers. Every entry point is resolved once with
// Dlsym and called with purego.SyscallN, which costs a fraction of a
// microsecond; the prototypes below are our own transcription of the
// documented C signatures (all arguments are integers or pointers).

// result is a CUresult.
type result int32

const (
	cudaSuccess       result = 0
	cudaErrorNoDevice result = 100
)

// minDriverVersion is the oldest driver (as cuDriverGetVersion reports it,
// 1000*major + 10*minor) the backend accepts: it needs stream capture,
// cuGraphInstantiateWithFlags and the primary-context API.
const minDriverVersion = 12000

// driver holds the resolved entry points of libcuda.
type driver struct {
	lib uintptr

	cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet             uintptr
	cuDeviceGetName, cuDeviceGetAttribute, cuDeviceTotalMem               uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxSetCurrent  uintptr
	cuMemAlloc, cuMemFree, cuMemGetInfo                                   uintptr
	cuMemcpyHtoD, cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync uintptr
	cuMemsetD8Async, cuMemAllocHost, cuMemFreeHost                        uintptr
	cuModuleLoadData, cuModuleGetFunction, cuModuleUnload                 uintptr
	cuLaunchKernel, cuFuncSetAttribute                                    uintptr
	cuStreamCreate, cuStreamSynchronize, cuStreamDestroy                  uintptr
	cuEventCreate, cuEventRecord, cuEventSynchronize, cuEventElapsedTime  uintptr
	cuEventDestroy                                                        uintptr
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiateWithFlags uintptr
	cuGraphLaunch, cuGraphExecDestroy, cuGraphDestroy                     uintptr
	cuGetErrorName, cuGetErrorString                                      uintptr

	// cuLaunchKernelEx (CUDA 12.0) launches with attributes such as
	// programmatic dependent launch; 0 when the driver lacks it.
	cuLaunchKernelEx uintptr
}

var (
	drvOnce sync.Once
	drv     *driver
	drvErr  error
)

// ErrNoDriver reports that libcuda.so.1 could not be opened: the machine has
// no NVIDIA driver. Callers that pick a device automatically fall back to
// the CPU on it.
var ErrNoDriver = errors.New("cuda: libcuda.so.1 not found (no NVIDIA driver)")

// ErrNoDevice reports a driver that sees no GPU.
var ErrNoDevice = errors.New("cuda: the driver reports no CUDA device")

// loadDriver opens libcuda once and resolves its symbols.
func loadDriver() (*driver, error) {
	drvOnce.Do(func() { drv, drvErr = openDriver() })
	return drv, drvErr
}

func openDriver() (*driver, error) {
	var lib uintptr
	var first error
	for _, name := range driverNames() {
		l, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			lib = l
			break
		}
		if first == nil {
			first = err
		}
	}
	if lib == 0 {
		return nil, fmt.Errorf("%w: %v", ErrNoDriver, first)
	}
	d := &driver{lib: lib}
	syms := []struct {
		p    *uintptr
		name string
	}{
		{&d.cuInit, "cuInit"},
		{&d.cuDriverGetVersion, "cuDriverGetVersion"},
		{&d.cuDeviceGetCount, "cuDeviceGetCount"},
		{&d.cuDeviceGet, "cuDeviceGet"},
		{&d.cuDeviceGetName, "cuDeviceGetName"},
		{&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
		{&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2"},
		{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&d.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&d.cuMemAlloc, "cuMemAlloc_v2"},
		{&d.cuMemFree, "cuMemFree_v2"},
		{&d.cuMemGetInfo, "cuMemGetInfo_v2"},
		{&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"},
		{&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
		{&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
		{&d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
		{&d.cuMemsetD8Async, "cuMemsetD8Async"},
		{&d.cuMemAllocHost, "cuMemAllocHost_v2"},
		{&d.cuMemFreeHost, "cuMemFreeHost"},
		{&d.cuModuleLoadData, "cuModuleLoadData"},
		{&d.cuModuleGetFunction, "cuModuleGetFunction"},
		{&d.cuModuleUnload, "cuModuleUnload"},
		{&d.cuLaunchKernel, "cuLaunchKernel"},
		{&d.cuFuncSetAttribute, "cuFuncSetAttribute"},
		{&d.cuStreamCreate, "cuStreamCreate"},
		{&d.cuStreamSynchronize, "cuStreamSynchronize"},
		{&d.cuStreamDestroy, "cuStreamDestroy_v2"},
		{&d.cuEventCreate, "cuEventCreate"},
		{&d.cuEventRecord, "cuEventRecord"},
		{&d.cuEventSynchronize, "cuEventSynchronize"},
		{&d.cuEventElapsedTime, "cuEventElapsedTime"},
		{&d.cuEventDestroy, "cuEventDestroy_v2"},
		{&d.cuStreamBeginCapture, "cuStreamBeginCapture_v2"},
		{&d.cuStreamEndCapture, "cuStreamEndCapture"},
		{&d.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags"},
		{&d.cuGraphLaunch, "cuGraphLaunch"},
		{&d.cuGraphExecDestroy, "cuGraphExecDestroy"},
		{&d.cuGraphDestroy, "cuGraphDestroy"},
		{&d.cuGetErrorName, "cuGetErrorName"},
		{&d.cuGetErrorString, "cuGetErrorString"},
	}
	for _, s := range syms {
		p, err := purego.Dlsym(lib, s.name)
		if err != nil {
			return nil, fmt.Errorf("cuda: libcuda.so.1 lacks %s (driver too old?): %v", s.name, err)
		}
		*s.p = p
	}
	if p, err := purego.Dlsym(lib, "cuLaunchKernelEx"); err == nil {
		d.cuLaunchKernelEx = p
	}
	return d, nil
}

// driverNames lists where libcuda is looked for: LEM_LIBCUDA first, then
// the loader's search path.
func driverNames() []string {
	var names []string
	if p := os.Getenv("LEM_LIBCUDA"); p != "" {
		names = append(names, p)
	}
	return append(names, "libcuda.so.1", "libcuda.so")
}

// call invokes a driver function returning CUresult.
func call(fn uintptr, args ...uintptr) result {
	r, _, _ := purego.SyscallN(fn, args...)
	return result(int32(r))
}

// Error is a failed driver call.
type Error struct {
	Op   string // the driver function
	Code int    // its CUresult
	Name string // the CUresult's name, e.g. CUDA_ERROR_OUT_OF_MEMORY
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Op, e.Name, e.Code, e.Msg)
}

// check turns a CUresult into an error naming the call.
func (d *driver) check(op string, r result) error {
	if r == cudaSuccess {
		return nil
	}
	e := &Error{Op: op, Code: int(r), Name: "unknown", Msg: "unknown error"}
	var p uintptr
	if call(d.cuGetErrorName, uintptr(r), uintptr(unsafe.Pointer(&p))) == cudaSuccess {
		e.Name = cString(p)
	}
	if call(d.cuGetErrorString, uintptr(r), uintptr(unsafe.Pointer(&p))) == cudaSuccess {
		e.Msg = cString(p)
	}
	return e
}

// cString copies a NUL-terminated C string owned by a library.
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(ptr, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(ptr), n))
}

// cBytes returns s as a NUL-terminated byte slice.
func cBytes(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// versionString formats a CUDA version number (1000*major + 10*minor).
func versionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10) }

// DeviceInfo describes a GPU as the driver reports it.
type DeviceInfo struct {
	Ordinal      int
	Name         string
	Major, Minor int // compute capability
	SMs          int
	Memory       int64 // bytes
	// Shared memory in bytes: an SM's, and the most a block may ask for.
	SharedPerSM, SharedPerBlock int
	Driver                      int // CUDA version the driver supports, 1000*major + 10*minor
}

func (i DeviceInfo) String() string {
	return fmt.Sprintf("cuda:%d %s (sm_%d%d, %d SMs, %.0f GiB, driver CUDA %s)",
		i.Ordinal, i.Name, i.Major, i.Minor, i.SMs, float64(i.Memory)/(1<<30), versionString(i.Driver))
}

// Probe initialises the driver and describes the GPUs it sees. It returns
// ErrNoDriver (wrapped) without libcuda, ErrNoDevice when the driver sees no
// GPU, and a descriptive error for a driver too old or otherwise unusable.
// The driver is asked once per process: a driver library whose
// initialisation failed (no kernel module, no device) may answer later
// queries differently, for example with version 0.
func Probe() ([]DeviceInfo, error) {
	infos, err := probeOnce()
	return slices.Clone(infos), err
}

var probeOnce = sync.OnceValues(probe)

func probe() ([]DeviceInfo, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	var ver int32
	if err := d.check("cuDriverGetVersion", call(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&ver)))); err != nil {
		return nil, err
	}
	if ver < minDriverVersion {
		return nil, fmt.Errorf("cuda: the NVIDIA driver supports CUDA %s; lem needs CUDA %s or newer (update the driver)",
			versionString(int(ver)), versionString(minDriverVersion))
	}
	if r := call(d.cuInit, 0); r != cudaSuccess {
		if r == cudaErrorNoDevice {
			return nil, ErrNoDevice
		}
		return nil, fmt.Errorf("cuda: driver (CUDA %s) failed to initialise: %w", versionString(int(ver)), d.check("cuInit", r))
	}
	var n int32
	if err := d.check("cuDeviceGetCount", call(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, ErrNoDevice
	}
	infos := make([]DeviceInfo, n)
	for i := range infos {
		var dev int32
		if err := d.check("cuDeviceGet", call(d.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(i))); err != nil {
			return nil, err
		}
		name := make([]byte, 256)
		if err := d.check("cuDeviceGetName", call(d.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(dev))); err != nil {
			return nil, err
		}
		attr := func(a int) int {
			var v int32
			call(d.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(dev))
			return int(v)
		}
		var mem uint64
		call(d.cuDeviceTotalMem, uintptr(unsafe.Pointer(&mem)), uintptr(dev))
		infos[i] = DeviceInfo{
			Ordinal: i,
			Name:    cString(uintptr(unsafe.Pointer(&name[0]))),
			Major:   attr(75), // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
			Minor:   attr(76), // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
			SMs:     attr(16), // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
			Memory:  int64(mem),
			Driver:  int(ver),
			// CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR and
			// CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN.
			SharedPerSM:    attr(81),
			SharedPerBlock: attr(97),
		}
	}
	return infos, nil
}

// cacheDir is where compiled kernel modules are kept:
// $LEM_CACHE/cuda, else the user cache directory ($XDG_CACHE_HOME or
// ~/.cache)/lem/cuda.
func cacheDir() string {
	if d := os.Getenv("LEM_CACHE"); d != "" {
		return filepath.Join(d, "cuda")
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "lem", "cuda")
}

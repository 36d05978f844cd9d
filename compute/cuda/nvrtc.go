package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Kernels are compiled at run time with NVRTC rather than shipped as PTX
// built ahead of time, for three reasons:
//
//   - The build needs no CUDA toolkit: `go build` with CGO_ENABLED=0 makes
//     the whole binary, and the kernel sources are embedded as text.
//   - NVRTC compiles for the exact compute capability of the GPU it finds
//     (sm_90 on Hopper, sm_120 on Blackwell…) and emits machine code
//     (CUBIN), so every architecture gets native code without a fat binary
//     and without the driver's PTX JIT, whose PTX ISA must not be newer than
//     the driver.
//   - Compile-time constants can later be specialised per model.
//
// The cost is a dependency on libnvrtc at run time (it ships with every CUDA
// toolkit and in the nvidia-cuda-nvrtc wheel) and a compile of a few seconds
// on first use; compiled modules are cached on disk under cacheDir keyed by
// a hash of the sources, options and NVRTC version, so later starts load the
// CUBIN directly.

// ErrNoNVRTC reports that libnvrtc, which compiles the kernels, could not be
// found.
var ErrNoNVRTC = errors.New("cuda: libnvrtc not found")

type nvrtc struct {
	lib                                             uintptr
	version, create, compile, logSize, log, destroy uintptr
	cubinSize, cubin, ptxSize, ptx, errorString     uintptr
	major, minor                                    int
	path                                            string
}

// openNVRTC finds libnvrtc: LEM_NVRTC, the loader's path, then the usual
// CUDA install locations.
func openNVRTC() (*nvrtc, error) {
	var cands []string
	if p := os.Getenv("LEM_NVRTC"); p != "" {
		cands = append(cands, p)
	}
	cands = append(cands, "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12")
	for _, pat := range []string{
		"/usr/local/cuda/lib64/libnvrtc.so*",
		"/usr/local/cuda/targets/*/lib/libnvrtc.so*",
		"/usr/local/cuda-*/lib64/libnvrtc.so*",
		"/usr/lib/x86_64-linux-gnu/libnvrtc.so*",
		"/usr/local/lib/python3*/dist-packages/nvidia/cu*/lib/libnvrtc.so*",
		"/usr/local/lib/python3*/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so*",
	} {
		m, _ := filepath.Glob(pat)
		for _, f := range m {
			if !strings.Contains(filepath.Base(f), "builtins") && !strings.Contains(filepath.Base(f), "alt") {
				cands = append(cands, f)
			}
		}
	}
	var lib uintptr
	var err error
	var path string
	for _, c := range cands {
		if lib, err = purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			path = c
			break
		}
	}
	if lib == 0 {
		return nil, fmt.Errorf("%w (install the CUDA toolkit's NVRTC or set LEM_NVRTC to libnvrtc.so): %v", ErrNoNVRTC, err)
	}
	n := &nvrtc{lib: lib, path: path}
	for _, s := range []struct {
		p    *uintptr
		name string
	}{
		{&n.version, "nvrtcVersion"},
		{&n.create, "nvrtcCreateProgram"},
		{&n.compile, "nvrtcCompileProgram"},
		{&n.logSize, "nvrtcGetProgramLogSize"},
		{&n.log, "nvrtcGetProgramLog"},
		{&n.destroy, "nvrtcDestroyProgram"},
		{&n.cubinSize, "nvrtcGetCUBINSize"},
		{&n.cubin, "nvrtcGetCUBIN"},
		{&n.ptxSize, "nvrtcGetPTXSize"},
		{&n.ptx, "nvrtcGetPTX"},
		{&n.errorString, "nvrtcGetErrorString"},
	} {
		p, err := purego.Dlsym(lib, s.name)
		if err != nil {
			return nil, fmt.Errorf("cuda: %s lacks %s: %v", path, s.name, err)
		}
		*s.p = p
	}
	var major, minor int32
	call(n.version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))
	n.major, n.minor = int(major), int(minor)
	return n, nil
}

func (n *nvrtc) check(op string, r result) error {
	if r == 0 {
		return nil
	}
	p, _, _ := purego.SyscallN(n.errorString, uintptr(r))
	return fmt.Errorf("cuda: %s: %s (%d)", op, cString(p), r)
}

// module compiles src for the given compute capability, or loads the result
// of an earlier compile from the disk cache. It returns a CUBIN, or PTX when
// this NVRTC cannot emit machine code for the GPU (the driver then JITs it).
func (n *nvrtc) module(src string, major, minor int) ([]byte, error) {
	opts := []string{
		fmt.Sprintf("--gpu-architecture=sm_%d%d", major, minor),
		"--std=c++17", "-default-device", "-lineinfo",
	}
	h := sha256.New()
	fmt.Fprintf(h, "nvrtc %d.%d\n%s\n%s", n.major, n.minor, strings.Join(opts, " "), src)
	key := hex.EncodeToString(h.Sum(nil))[:32]
	dir := cacheDir()
	if dir != "" {
		if b, err := os.ReadFile(filepath.Join(dir, key+".cubin")); err == nil && len(b) > 0 {
			return b, nil
		}
	}
	img, err := n.build(src, opts, true)
	if err != nil && strings.Contains(err.Error(), "gpu-architecture") {
		// This NVRTC predates the GPU: emit PTX for the newest virtual
		// architecture it knows and let the driver finish the job.
		opts[0] = "--gpu-architecture=compute_90"
		img, err = n.build(src, opts, false)
	}
	if err != nil {
		return nil, err
	}
	if dir != "" {
		if os.MkdirAll(dir, 0o755) == nil {
			tmp, err := os.CreateTemp(dir, key+".tmp*")
			if err == nil {
				_, werr := tmp.Write(img)
				if cerr := tmp.Close(); werr == nil && cerr == nil {
					os.Rename(tmp.Name(), filepath.Join(dir, key+".cubin"))
				} else {
					os.Remove(tmp.Name())
				}
			}
		}
	}
	return img, nil
}

// build runs one NVRTC compile and returns CUBIN (or PTX) bytes.
func (n *nvrtc) build(src string, opts []string, cubin bool) ([]byte, error) {
	csrc, cname := cBytes(src), cBytes("lem_kernels.cu")
	var prog uintptr
	if err := n.check("nvrtcCreateProgram", call(n.create, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0)); err != nil {
		return nil, err
	}
	defer call(n.destroy, uintptr(unsafe.Pointer(&prog)))
	copts := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts))
	for i, o := range opts {
		copts[i] = cBytes(o)
		ptrs[i] = uintptr(unsafe.Pointer(&copts[i][0]))
	}
	r := call(n.compile, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(copts)
	runtime.KeepAlive(ptrs)
	runtime.KeepAlive(csrc)
	runtime.KeepAlive(cname)
	if r != 0 {
		var size uintptr
		call(n.logSize, prog, uintptr(unsafe.Pointer(&size)))
		log := make([]byte, size+1)
		call(n.log, prog, uintptr(unsafe.Pointer(&log[0])))
		return nil, fmt.Errorf("%w\n%s", n.check("nvrtcCompileProgram "+strings.Join(opts, " "), r), strings.TrimRight(string(log), "\x00\n"))
	}
	sizeFn, getFn := n.cubinSize, n.cubin
	if !cubin {
		sizeFn, getFn = n.ptxSize, n.ptx
	}
	var size uintptr
	if err := n.check("nvrtcGetCUBINSize", call(sizeFn, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return nil, err
	}
	img := make([]byte, size)
	if err := n.check("nvrtcGetCUBIN", call(getFn, prog, uintptr(unsafe.Pointer(&img[0])))); err != nil {
		return nil, err
	}
	return img, nil
}

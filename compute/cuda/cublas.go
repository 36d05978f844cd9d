package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Prefill matrix products on half-precision weights run on the tensor
// cores. When cuBLAS is installed (the CUDA toolkit, or the nvidia-cublas
// wheel PyTorch brings along) it is opened at run time like libcuda and
// NVRTC, and cublasGemmEx does the work; without it the backend's own
// tensor-core kernel (kernels/mma_gemm.cu) does. Set LEM_CUBLAS to the path
// of libcublas.so to pick a library, or to "off" to use the own kernel.

// cuBLAS constants, from the documented enumerations.
const (
	cublasOpN          = 0
	cublasOpT          = 1
	cudaR32F           = 0
	cudaR16F           = 2
	cudaR16BF          = 14
	cublasCompute32F   = 68
	cublasWorkspace    = 32 << 20 // bytes preallocated for cuBLAS, so calls can be graph-captured
	cublasStatusSucces = 0
)

// gemmDefaultAlgo is CUBLAS_GEMM_DEFAULT (-1) as a 32-bit argument.
var gemmDefaultAlgo = uintptr(uint32(0xffffffff))

// blas is an opened cuBLAS with a handle bound to the backend's stream.
type blas struct {
	lib, ltLib   uintptr
	path         string
	version      int
	handle       uintptr
	gemmEx       uintptr
	create       uintptr
	destroy      uintptr
	setStream    uintptr
	setWorkspace uintptr
	getVersion   uintptr
	workspace    uintptr
	alpha, beta  *float32 // host scalars cuBLAS reads at each call
}

// cublasDirs lists the directories searched for libcublas: the CUDA
// toolkit's and the Python wheels' (system, user and virtual environments).
func cublasDirs() []string {
	var dirs []string
	pats := []string{
		"/usr/local/cuda/lib64", "/usr/local/cuda/targets/*/lib", "/usr/local/cuda-*/lib64",
		"/usr/lib/x86_64-linux-gnu",
	}
	var roots []string
	if v := os.Getenv("VIRTUAL_ENV"); v != "" {
		roots = append(roots, v)
	}
	if h, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(h, ".local"), filepath.Join(h, ".venv"), filepath.Join(h, "venv"))
	}
	roots = append(roots, "/usr/local", "/usr", "/opt/*", "/opt/*/venv", "/opt/*/.venv", "/workspace/*", "/venv", "/opt/conda")
	for _, r := range roots {
		for _, sp := range []string{"dist-packages", "site-packages"} {
			pats = append(pats,
				filepath.Join(r, "lib/python3*", sp, "nvidia/cublas/lib"),
				filepath.Join(r, "lib/python3*", sp, "nvidia/cu*/lib"))
		}
	}
	for _, p := range pats {
		m, _ := filepath.Glob(p)
		sort.Sort(sort.Reverse(sort.StringSlice(m))) // newest versions first
		dirs = append(dirs, m...)
	}
	return dirs
}

// cublasCandidates lists the libcublas files to try, best first: LEM_CUBLAS,
// then the loader's path, then each searched directory.
func cublasCandidates() []string {
	var c []string
	if p := os.Getenv("LEM_CUBLAS"); p != "" {
		c = append(c, p)
	}
	c = append(c, "libcublas.so.13", "libcublas.so.12", "libcublas.so")
	for _, d := range cublasDirs() {
		m, _ := filepath.Glob(filepath.Join(d, "libcublas.so*"))
		sort.Sort(sort.Reverse(sort.StringSlice(m)))
		c = append(c, m...)
	}
	return c
}

// openBLAS opens cuBLAS and resolves the entry points used. It returns an
// error saying what was tried when no usable library is found.
func openBLAS() (*blas, error) {
	if os.Getenv("LEM_CUBLAS") == "off" {
		return nil, fmt.Errorf("cuda: cuBLAS disabled by LEM_CUBLAS=off")
	}
	var tried []string
	for _, c := range cublasCandidates() {
		bl := &blas{path: c, alpha: new(float32), beta: new(float32)}
		// libcublas needs libcublasLt of the same release; open it from the
		// same directory first, so the loader finds it by soname.
		if strings.Contains(c, "/") {
			lt := filepath.Join(filepath.Dir(c), strings.Replace(filepath.Base(c), "libcublas", "libcublasLt", 1))
			if l, err := purego.Dlopen(lt, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
				bl.ltLib = l
			}
		}
		l, err := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			tried = append(tried, c)
			continue
		}
		bl.lib = l
		ok := true
		for _, s := range []struct {
			p    *uintptr
			name string
		}{
			{&bl.create, "cublasCreate_v2"},
			{&bl.destroy, "cublasDestroy_v2"},
			{&bl.setStream, "cublasSetStream_v2"},
			{&bl.setWorkspace, "cublasSetWorkspace_v2"},
			{&bl.getVersion, "cublasGetVersion_v2"},
			{&bl.gemmEx, "cublasGemmEx"},
		} {
			p, err := purego.Dlsym(l, s.name)
			if err != nil {
				ok = false
				break
			}
			*s.p = p
		}
		if !ok {
			tried = append(tried, c+" (symbols missing)")
			continue
		}
		return bl, nil
	}
	return nil, fmt.Errorf("cuda: libcublas not found (tried %d names; set LEM_CUBLAS)", len(tried))
}

// bind creates the handle on the owner thread (the context must be
// current), attaches the stream and a preallocated workspace.
func (bl *blas) bind(w *owner) error {
	if r := call(bl.create, uintptr(unsafe.Pointer(&bl.handle))); r != cublasStatusSucces {
		return fmt.Errorf("cuda: cublasCreate (%s): status %d", bl.path, r)
	}
	var v int32
	call(bl.getVersion, bl.handle, uintptr(unsafe.Pointer(&v)))
	bl.version = int(v)
	if r := call(bl.setStream, bl.handle, w.stream); r != cublasStatusSucces {
		return fmt.Errorf("cuda: cublasSetStream: status %d", r)
	}
	ws, err := w.alloc(cublasWorkspace)
	if err != nil {
		return err
	}
	bl.workspace = ws
	if r := call(bl.setWorkspace, bl.handle, ws, cublasWorkspace); r != cublasStatusSucces {
		return fmt.Errorf("cuda: cublasSetWorkspace: status %d", r)
	}
	return nil
}

// release destroys the handle and frees the workspace (owner thread).
func (bl *blas) release(w *owner) {
	if bl.handle != 0 {
		call(bl.destroy, bl.handle)
		bl.handle = 0
	}
	if bl.workspace != 0 {
		call(w.d.cuMemFree, bl.workspace)
		bl.workspace = 0
	}
}

// versionString formats cuBLAS's version number (major·10000 + minor·100 +
// patch).
func (bl *blas) versionString() string {
	v := bl.version
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}

// gemm computes dst[n, m] (f32) = beta·dst + x[n, k] · w[m, k]ᵀ with x and
// w both of half-precision type dt (cudaR16BF or cudaR16F), accumulating in
// f32. In cuBLAS's column-major terms: dstᵀ[m, n] = wᵀᵀ · xᵀ. Owner thread.
func (bl *blas) gemm(w *owner, dst, x, wt uintptr, dt, n, m, k int, beta float32) error {
	*bl.alpha, *bl.beta = 1, beta
	r := call(bl.gemmEx, bl.handle, cublasOpT, cublasOpN,
		uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(bl.alpha)),
		wt, uintptr(dt), uintptr(k),
		x, uintptr(dt), uintptr(k),
		uintptr(unsafe.Pointer(bl.beta)),
		dst, cudaR32F, uintptr(m),
		cublasCompute32F, gemmDefaultAlgo)
	if r != cublasStatusSucces {
		return fmt.Errorf("cuda: cublasGemmEx n=%d m=%d k=%d: status %d", n, m, k, r)
	}
	return nil
}

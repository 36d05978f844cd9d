package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestKernelSource checks the kernels' source (one translation unit, as
// NVRTC compiles it on a device) with a host C++ compiler, without a GPU:
// g++ -fsyntax-only over it, with CUDA's built-ins declared by
// testdata/cuda_builtins.h, finds syntax errors, unknown names, wrong types
// and arguments, also inside the templates the kernels instantiate. It
// does not check inline PTX or what only NVRTC rejects. CI installs g++;
// elsewhere the test is skipped without it.
func TestKernelSource(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("g++ not found: CI checks the kernels' source with it")
		}
		t.Skip("no g++")
	}
	src, err := kernelSource()
	if err != nil {
		t.Fatal(err)
	}
	builtins, err := filepath.Abs("testdata/cuda_builtins.h")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "lem_kernels.cu")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gxx, "-std=c++17", "-fsyntax-only", "-w", "-include", builtins, "-x", "c++", file).CombinedOutput()
	if err != nil {
		t.Fatalf("g++ -fsyntax-only on the kernels: %v\n%s", err, out)
	}
}

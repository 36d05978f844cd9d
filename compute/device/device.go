// Package device picks the compute backend a command runs on.
package device

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/compute/cuda"
)

// Open returns the backend named by spec and a one-line description of it
// for the startup line:
//
//	auto     CUDA device 0 when libcuda.so.1 and a GPU are present, else the CPU
//	cpu      the CPU with the given number of threads (0: all cores)
//	cuda     CUDA device 0
//	cuda:N   CUDA device N
//
// Under auto, a machine without the NVIDIA driver or without a GPU runs on
// the CPU, as does one without NVRTC (the description says so); a driver that is present but too old or broken is an error that
// names the versions, as is any failure of an explicit cuda spec.
func Open(spec string, threads int) (compute.Backend, string, error) {
	spec = strings.ToLower(strings.TrimSpace(spec))
	switch {
	case spec == "cpu":
		b := cpu.New(threads)
		return b, b.Name(), nil
	case spec == "" || spec == "auto":
		g, err := cuda.Open(0)
		if err == nil {
			return g, g.Name(), nil
		}
		if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
			b := cpu.New(threads)
			return b, b.Name(), nil
		}
		if errors.Is(err, cuda.ErrNoNVRTC) {
			b := cpu.New(threads)
			return b, b.Name() + "; GPU not used: libnvrtc not found (set LEM_NVRTC)", nil
		}
		return nil, "", fmt.Errorf("device auto: a GPU driver is present but unusable (use --device cpu to run on the CPU): %w", err)
	case spec == "cuda" || strings.HasPrefix(spec, "cuda:"):
		n := 0
		if s, ok := strings.CutPrefix(spec, "cuda:"); ok {
			v, err := strconv.Atoi(s)
			if err != nil || v < 0 {
				return nil, "", fmt.Errorf("device %q: want cuda:N with N a device number", spec)
			}
			n = v
		}
		g, err := cuda.Open(n)
		if err != nil {
			return nil, "", fmt.Errorf("device %s: %w", spec, err)
		}
		return g, g.Name(), nil
	}
	return nil, "", fmt.Errorf("device %q: want auto, cpu, cuda or cuda:N", spec)
}

// Describe says what each backend would run on, one line each, for
// `lem version`: the CPU's kernels, then each GPU the NVIDIA driver shows
// or why none is used.
func Describe() []string {
	lines := []string{fmt.Sprintf("cpu:  %d cores, %s kernels", runtime.NumCPU(), cpu.Level())}
	gpus, err := cuda.Probe()
	if err != nil {
		return append(lines, "cuda: not used: "+err.Error())
	}
	for _, g := range gpus {
		lines = append(lines, "cuda: "+g.String())
	}
	return lines
}

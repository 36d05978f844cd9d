package cuda

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

// kernelFS holds the CUDA C sources, one file per operation family;
// common.cuh is placed first.
//
//go:embed kernels/common.cuh kernels/*.cu
var kernelFS embed.FS

// kernelSource returns all kernels as one translation unit.
func kernelSource() (string, error) {
	var sb strings.Builder
	common, err := kernelFS.ReadFile("kernels/common.cuh")
	if err != nil {
		return "", err
	}
	sb.Write(common)
	names, err := fs.Glob(kernelFS, "kernels/*.cu")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := kernelFS.ReadFile(n)
		if err != nil {
			return "", err
		}
		sb.WriteString("\n// ---- " + n + "\n")
		sb.Write(b)
	}
	return sb.String(), nil
}

// kernels holds the function handles of the loaded module.
type kernels struct {
	embed, binary, scale, softcap, activation, glu, columns uintptr
	rmsnorm, layernorm, rope, kvstore, attendCombine        uintptr
	attend                                                  [4]uintptr // 2, 4, 8, 16 elements per lane
	gemv                                                    [3][4]uintptr
	paged                                                   pagedKernels
	gemm                                                    [3]uintptr // by dtype: f32, f16, bf16

	convOut, convState, ssmScan, deltaRule uintptr
	moeRoute, moeGateUp, moeDown           uintptr
	axpyRows, matchRMS, gaussianTopK       uintptr

	tc      tcKernels      // tensor-core prefill matmul kernels (gemm.go)
	flash   flashKernels   // flash attention kernels (flash.go)
	enc     encoderKernels // bidirectional attention (encoder.go)
	dec     decodeKernels
	q       quantKernels // quant.go
	chunked chunkedKernels
}

// kernelTable lists every kernel with where its handle goes.
func (k *kernels) table() map[string]*uintptr {
	t := map[string]*uintptr{
		"embed": &k.embed, "binary": &k.binary, "scale": &k.scale, "softcap": &k.softcap,
		"activation": &k.activation, "glu": &k.glu, "columns": &k.columns,
		"rmsnorm": &k.rmsnorm, "layernorm": &k.layernorm, "rope": &k.rope, "kvstore": &k.kvstore, "attend_combine": &k.attendCombine,
		"attend2": &k.attend[0], "attend4": &k.attend[1], "attend8": &k.attend[2], "attend16": &k.attend[3],
		"gemm_f32": &k.gemm[0], "gemm_f16": &k.gemm[1], "gemm_bf16": &k.gemm[2],
		"conv_out": &k.convOut, "conv_state": &k.convState, "ssm_scan": &k.ssmScan, "delta_rule": &k.deltaRule,
		"moe_route": &k.moeRoute, "moe_gateup": &k.moeGateUp, "moe_down": &k.moeDown,
		"axpy_rows": &k.axpyRows, "match_rms": &k.matchRMS, "gaussian_topk": &k.gaussianTopK,
	}
	k.tc.add(t)
	k.flash.add(t)
	k.enc.add(t)
	k.dec.add(t)
	k.q.add(t)
	k.chunked.add(t)
	k.paged.add(t)
	for d, dn := range []string{"f32", "f16", "bf16"} {
		for r := range 4 {
			t["gemv_"+dn+"_"+string(rune('1'+r))] = &k.gemv[d][r]
		}
	}
	return t
}

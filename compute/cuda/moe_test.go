package cuda

import (
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// fake makes a tensor at a made-up device address, for host-side tests.
func fake(addr uintptr, dt compute.DType, shape ...int) *compute.Tensor {
	return &compute.Tensor{DType: dt, Shape: shape, Buf: &buffer{ptr: addr}}
}

func TestDescribeExperts(t *testing.T) {
	const hid = 64
	split := compute.Expert{
		Gate: fake(0x1000, compute.BF16, 24, hid), Up: fake(0x2000, compute.BF16, 24, hid),
		Down: fake(0x3000, compute.BF16, hid, 24),
	}
	fused := compute.Expert{
		GateUp: fake(0x10000, compute.F16, 2*16, hid), Down: fake(0x20000, compute.F32, hid, 16),
		GateUpBias: fake(0x30000, compute.F32, 2*16), DownBias: fake(0x40000, compute.BF16, hid),
	}
	for _, tc := range []struct {
		name     string
		experts  []compute.Expert
		want     []uint64
		maxInter int
		err      string
	}{
		{
			name:    "split and fused",
			experts: []compute.Expert{split, fused},
			want: []uint64{
				0x1000, 0x2000, 0x3000, 0, 0, 0, 24, uint64(compute.BF16) | uint64(compute.BF16)<<8,
				0x10000, 0x10000 + 16*hid*2, 0x20000, 0x30000, 0x30000 + 16*4, 0x40000, 16,
				uint64(compute.F16) | uint64(compute.F32)<<8 | uint64(compute.F32)<<16 | uint64(compute.BF16)<<24,
			},
			maxInter: 24,
		},
		{name: "no experts", maxInter: 0},
		{
			name:    "wrong hidden size",
			experts: []compute.Expert{{Gate: split.Gate, Up: split.Up, Down: fake(0x3000, compute.BF16, hid+1, 24)}},
			err:     "down projection of hidden size 64",
		},
		{
			name:    "mixed gate and up",
			experts: []compute.Expert{{Gate: split.Gate, Up: fake(0x2000, compute.F16, 24, hid), Down: split.Down}},
			err:     "different types",
		},
		{
			name:    "short fused bias",
			experts: []compute.Expert{{GateUp: fused.GateUp, Down: fused.Down, GateUpBias: fake(0x30000, compute.F32, 16)}},
			err:     "gate/up bias of 16 values",
		},
		{
			name:    "quantized",
			experts: []compute.Expert{{Gate: fake(1, compute.Q8_0, 24, hid), Up: fake(2, compute.Q8_0, 24, hid), Down: split.Down}},
			err:     "weights of type q8_0",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, mi, err := describeExperts(nil, &compute.ExpertFFN{Experts: tc.experts}, hid)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) || mi != tc.maxInter {
				t.Errorf("descriptors %#x (max inter %d),\nwant %#x (%d)", got, mi, tc.want, tc.maxInter)
			}
			if len(got) != moeDesc*len(tc.experts) {
				t.Errorf("%d words for %d experts", len(got), len(tc.experts))
			}
		})
	}
}

// TestCheckExperts checks that a model loader learns at load time that
// quantized experts cannot run on the GPU.
func TestCheckExperts(t *testing.T) {
	const hid = 64
	var b Backend
	ok := compute.Expert{Gate: fake(1, compute.BF16, 24, hid), Up: fake(2, compute.BF16, 24, hid), Down: fake(3, compute.BF16, hid, 24)}
	if err := b.CheckExperts(&compute.ExpertFFN{Experts: []compute.Expert{ok}}, hid); err != nil {
		t.Errorf("bf16 experts: %v", err)
	}
	q := compute.Expert{Gate: fake(1, compute.Q4_K, 24, hid), Up: fake(2, compute.Q4_K, 24, hid), Down: fake(3, compute.Q6_K, hid, 24)}
	err := b.CheckExperts(&compute.ExpertFFN{Experts: []compute.Expert{ok, q}}, hid)
	if err == nil || !strings.Contains(err.Error(), "expert 1: weights of type q4_k") {
		t.Errorf("quantized experts: error %v", err)
	}
}

// TestKernelTable checks that every kernel the backend loads is defined in
// the embedded sources, so that a missing or misspelt name fails here
// rather than only on a GPU.
func TestKernelTable(t *testing.T) {
	src, err := kernelSource()
	if err != nil {
		t.Fatal(err)
	}
	var k kernels
	for name := range k.table() {
		if !strings.Contains(src, " "+name+"(") && !strings.Contains(src, "GEMV("+name+",") && !strings.Contains(src, "GEMV8("+name+",") {
			t.Errorf("kernel %s is not defined in the sources", name)
		}
	}
}

package cpu

import (
	"math"
	"testing"

	"github.com/lem-engine/lem/compute"
)

func TestRowOps(t *testing.T) {
	b := New(1)
	tensor := func(rows, cols int, vals ...float32) *compute.Tensor {
		x := b.Alloc(compute.F32, rows, cols)
		b.Upload(x, vals)
		return x
	}
	tests := []struct {
		name string
		run  func() *compute.Tensor
		want []float32
	}{
		{
			name: "Add repeats a single row over every row",
			run: func() *compute.Tensor {
				x := tensor(2, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 40, 50, 60, 70, 80, 90)
				bias := tensor(1, 9, 1, 1, 1, 1, 1, 1, 1, 1, -1)
				b.Add(x, x, bias)
				return x
			},
			want: []float32{2, 3, 4, 5, 6, 7, 8, 9, 8, 11, 21, 31, 41, 51, 61, 71, 81, 89},
		},
		{
			name: "Mul of equal shapes is elementwise",
			run: func() *compute.Tensor {
				x := tensor(1, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9)
				y := tensor(1, 9, 2, 2, 2, 2, 2, 2, 2, 2, -1)
				dst := b.Alloc(compute.F32, 1, 9)
				b.Mul(dst, x, y)
				return dst
			},
			want: []float32{2, 4, 6, 8, 10, 12, 14, 16, -9},
		},
		{
			name: "AxpyRows uses each row's coefficient",
			run: func() *compute.Tensor {
				dst := tensor(2, 3, 1, 1, 1, 2, 2, 2)
				x := tensor(2, 3, 1, 2, 3, 4, 5, 6)
				s := tensor(2, 2, 9, 10, 9, -0.5)
				b.AxpyRows(dst, x, s, 1)
				return dst
			},
			want: []float32{11, 21, 31, 0, -0.5, -1},
		},
		{
			name: "MatchRMS scales to the reference's magnitude",
			run: func() *compute.Tensor {
				x := tensor(2, 2, 3, 4, 0, 0)
				ref := tensor(2, 2, 1, 1, 2, 2)
				dst := b.Alloc(compute.F32, 2, 2)
				b.MatchRMS(dst, x, ref, 1e-5)
				return dst
			},
			// Row 0: rms(x) = √12.5, rms(ref) = 1. Row 1: the floor keeps zeros zero.
			want: []float32{3 / float32(math.Sqrt(12.5)), 4 / float32(math.Sqrt(12.5)), 0, 0},
		},
		{
			name: "MatchRMS floor bounds the divisor",
			run: func() *compute.Tensor {
				x := tensor(1, 2, 0.001, 0.001)
				ref := tensor(1, 2, 1, 1)
				dst := b.Alloc(compute.F32, 1, 2)
				b.MatchRMS(dst, x, ref, 1e-4)
				return dst
			},
			want: []float32{0.1, 0.1},
		},
		{
			name: "GaussianTopK keeps what lies above mean + k·std",
			run: func() *compute.Tensor {
				// mean 2.5, population std √1.25.
				x := tensor(1, 4, 1, 2, 3, 4)
				dst := b.Alloc(compute.F32, 1, 4)
				b.GaussianTopK(dst, x, 1)
				return dst
			},
			want: []float32{0, 0, 0, 4 - 2.5 - float32(math.Sqrt(1.25))},
		},
		{
			name: "GaussianTopK with a negative score keeps more",
			run: func() *compute.Tensor {
				x := tensor(2, 2, -1, 1, 5, 5)
				dst := b.Alloc(compute.F32, 2, 2)
				b.GaussianTopK(dst, x, -1)
				return dst
			},
			want: []float32{0, 2, 0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make([]float32, len(tt.want))
			b.Read(got, tt.run())
			for i := range got {
				if math.Abs(float64(got[i]-tt.want[i])) > 1e-6 {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

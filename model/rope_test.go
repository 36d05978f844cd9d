package model

import (
	"math"
	"testing"
)

func TestProportionalRope(t *testing.T) {
	tests := []struct {
		name    string
		p       RopeParams
		headDim int
		// want holds the inverse frequencies of the turning pairs; the rest
		// must be 0.
		want []float64
	}{
		{"quarter of 32", RopeParams{Type: "proportional", Theta: 1e6, Factor: 1, PartialRotaryFactor: 0.25}, 32,
			[]float64{1, math.Pow(1e6, -2.0/32), math.Pow(1e6, -4.0/32), math.Pow(1e6, -6.0/32)}},
		{"factor divides", RopeParams{Type: "proportional", Theta: 100, Factor: 4, PartialRotaryFactor: 0.5}, 8,
			[]float64{0.25, math.Pow(100, -2.0/8) / 4}},
		{"whole head", RopeParams{Type: "proportional", Theta: 10000, Factor: 1, PartialRotaryFactor: 1}, 4,
			[]float64{1, 0.01}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRope(tt.p, tt.headDim, 4096)
			if err != nil {
				t.Fatal(err)
			}
			if r.Dims != tt.headDim || len(r.InvFreq) != tt.headDim/2 || r.Scale != 1 || r.Interleaved {
				t.Fatalf("rope %+v: want the whole head of %d split in halves", r, tt.headDim)
			}
			for i, f := range r.InvFreq {
				want := 0.0
				if i < len(tt.want) {
					want = tt.want[i]
				}
				if math.Abs(float64(f)-want) > 1e-6*max(want, 1e-30) {
					t.Errorf("InvFreq[%d] = %g, want %g", i, f, want)
				}
			}
		})
	}
	if _, err := NewRope(RopeParams{Type: "proportional", Theta: 1e4, Factor: 1, PartialRotaryFactor: 1}, 7, 64); err == nil {
		t.Error("odd head size accepted")
	}
}

package model

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"lem/compute"
	"lem/compute/cpu"
	"lem/internal/fixtures"
	"lem/safetensors"
)

// plainBackend hides every optional interface of the backend it wraps.
type plainBackend struct{ compute.Backend }

func TestMoENeedsExpertsBackend(t *testing.T) {
	b := plainBackend{cpu.New(1)}
	if _, ok := compute.Backend(b).(compute.Experts); ok {
		t.Fatal("plainBackend implements compute.Experts")
	}
	dense, err := OpenDir(fixtures.Dir(t, "archs", "qwen3"), b)
	if err != nil {
		t.Fatalf("a dense model on the plain backend: %v", err)
	}
	dense.Close()
	for _, name := range []string{"qwen3_moe"} {
		m, err := OpenDir(fixtures.Dir(t, "archs", name), b)
		if err == nil {
			m.Close()
			t.Errorf("%s loaded on a backend without compute.Experts", name)
			continue
		}
		if !strings.Contains(err.Error(), "compute.Experts") {
			t.Errorf("%s: error %q does not name compute.Experts", name, err)
		}
	}
}

// editedSource is a fixture's tensors with some hidden or replaced.
type editedSource struct {
	Source
	hide    string
	replace map[string]Stored
}

func (s editedSource) Lookup(name string) (Stored, bool) {
	if s.hide != "" && name == s.hide {
		return Stored{}, false
	}
	if r, ok := s.replace[name]; ok {
		return r, true
	}
	return s.Source.Lookup(name)
}

func TestMoELoadErrors(t *testing.T) {
	for _, c := range []struct {
		arch, hide, reshape string
		want                string
	}{
		{arch: "qwen3_moe", hide: "model.layers.2.mlp.experts.3.up_proj.weight", want: "tensor model.layers.2.mlp.experts.3.up_proj.weight is missing"},
		{arch: "qwen3_moe", hide: "model.layers.0.mlp.gate.weight", want: "tensor model.layers.0.mlp.gate.weight is missing"},
		{arch: "qwen3_moe", reshape: "model.layers.1.mlp.experts.0.down_proj.weight", want: "tensor model.layers.1.mlp.experts.0.down_proj.weight has shape"},
	} {
		t.Run(c.arch+"/"+c.hide+c.reshape, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", c.arch)
			cfg, err := LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			st, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			src := editedSource{Source: safetensorsSource{st}, hide: c.hide}
			if c.reshape != "" {
				s, ok := src.Lookup(c.reshape)
				if !ok {
					t.Fatalf("no tensor %s", c.reshape)
				}
				s.Shape = append([]int{1}, s.Shape...)
				src.replace = map[string]Stored{c.reshape: s}
			}
			_, err = Load(cfg, src, cpu.New(1))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestMoETransposes(t *testing.T) {
	// hid 2, inter 2: columns g0 u0 g1 u1 per input row.
	u16 := func(v ...uint16) []byte {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], x)
		}
		return b
	}
	src := u16(
		10, 20, 11, 21, // h0: g0 u0 g1 u1
		30, 40, 31, 41, // h1
	)
	want := u16(
		10, 30, // gate row 0 over h0, h1
		11, 31, // gate row 1
		20, 40, // up row 0
		21, 41, // up row 1
	)
	if got := deinterleaveT(src, 2, 2, 2); !slices.Equal(got, want) {
		t.Errorf("deinterleaveT = %v, want %v", got, want)
	}
	if got := transpose(u16(1, 2, 3, 4, 5, 6), 2, 3, 2); !slices.Equal(got, u16(1, 4, 2, 5, 3, 6)) {
		t.Errorf("transpose = %v", got)
	}
	if got := deinterleave([]float32{1, 2, 3, 4, 5, 6}); !slices.Equal(got, []float32{1, 3, 5, 2, 4, 6}) {
		t.Errorf("deinterleave = %v", got)
	}
}

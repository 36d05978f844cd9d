package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute/cuda"
)

func TestOpen(t *testing.T) {
	_, gpuErr := cuda.Probe()
	noGPU := errors.Is(gpuErr, cuda.ErrNoDriver) || errors.Is(gpuErr, cuda.ErrNoDevice)
	type testCase struct {
		spec    string
		wantErr bool
		prefix  string // of the description
	}
	tests := []testCase{
		{spec: "cpu", prefix: "cpu"},
		{spec: "CPU", prefix: "cpu"},
		{spec: "gpu", wantErr: true},
		{spec: "cuda:x", wantErr: true},
		{spec: "cuda:-1", wantErr: true},
		{spec: "cuda:99", wantErr: true},
	}
	switch {
	case noGPU:
		// auto falls back to the CPU; an explicit cuda is an error.
		tests = append(tests, testCase{spec: "auto", prefix: "cpu"}, testCase{spec: "cuda", wantErr: true})
	case gpuErr == nil:
		tests = append(tests, testCase{spec: "auto", prefix: "cuda:0"}, testCase{spec: "cuda:0", prefix: "cuda:0"})
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			b, desc, err := Open(tt.spec, 1)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Open(%q) = %q, want an error", tt.spec, desc)
				}
				t.Logf("error: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", tt.spec, err)
			}
			if b == nil || !strings.HasPrefix(desc, tt.prefix) {
				t.Fatalf("Open(%q) description %q, want prefix %q", tt.spec, desc, tt.prefix)
			}
			t.Logf("%s", desc)
			if c, ok := b.(*cuda.Backend); ok {
				c.Close()
			}
		})
	}
}

package engine

import (
	"testing"

	"lem/internal/fixtures"
)

// gemmaNext are the fixtures of Gemma 3n and Gemma 4: per-layer inputs,
// KV-shared layers, per-layer head sizes, proportional rope, AltUp, LAuReL,
// activation sparsity and the MoE block.
var gemmaNext = []string{"gemma3n_text", "gemma4_text", "gemma4_text-kvshared"}

func TestGemmaNextConformance(t *testing.T) {
	for _, name := range gemmaNext {
		t.Run(name, func(t *testing.T) {
			testArch(t, fixtures.Dir(t, "archs", name))
		})
	}
}

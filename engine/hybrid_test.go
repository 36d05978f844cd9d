package engine

import (
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// hybridFixtures are the families whose stacks mix Gated DeltaNet linear
// attention with (gated, or in OLMo Hybrid post-normed) softmax attention.
var hybridFixtures = []string{"qwen3_5_text", "qwen3_next", "qwen3_5_moe_text", "olmo_hybrid"}

func TestHybridConformance(t *testing.T) {
	for _, name := range hybridFixtures {
		t.Run(name, func(t *testing.T) {
			testArch(t, fixtures.Dir(t, "archs", name))
		})
	}
}

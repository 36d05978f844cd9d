package engine

import (
	"testing"

	"lem/internal/fixtures"
)

// moeFixtures are the mixture-of-experts fixtures that the CPU runs.
var moeFixtures = []string{"qwen3_moe", "gpt_oss"}

func TestMoEConformance(t *testing.T) {
	for _, name := range moeFixtures {
		t.Run(name, func(t *testing.T) {
			testArch(t, fixtures.Dir(t, "archs", name))
		})
	}
}

// BenchmarkMoEDecodeStep measures a decode step of the mixture-of-experts
// fixtures: routing and the picked experts. Routing scratch is allocated
// once per state and chunk size, so the steady-state step must not
// allocate.
func BenchmarkMoEDecodeStep(b *testing.B) { benchDecodeSteps(b, moeFixtures) }

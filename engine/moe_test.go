package engine

import (
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
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

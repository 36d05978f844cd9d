package engine

import (
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// ssmFixtures are the fixtures of the state-space and short-convolution
// families.
var ssmFixtures = []string{"mamba2", "lfm2", "falcon_h1"}

func TestSSMConformance(t *testing.T) {
	for _, name := range ssmFixtures {
		t.Run(name, func(t *testing.T) {
			testArch(t, fixtures.Dir(t, "archs", name))
		})
	}
}

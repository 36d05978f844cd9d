package engine

import (
	"os"
	"testing"

	"lem/compute/device"
	"lem/internal/archref"
	"lem/internal/fixtures"
)

// deviceTolerance is the largest logit difference allowed on a device for
// the families that need the optional operations (mixture of experts,
// recurrences, per-row operations), which sum in another order there.
const deviceTolerance = 2e-3

// TestConformanceOnDevice runs the dense and modern conformance and the
// chat model through the engine (sessions, recorded decode graphs where the
// backend records them) on the device LEM_TEST_DEVICE names, such as
// "cuda". It is skipped when the variable is unset, as it is in CI, which
// has no GPU.
func TestConformanceOnDevice(t *testing.T) {
	spec := os.Getenv("LEM_TEST_DEVICE")
	if spec == "" {
		t.Skip("LEM_TEST_DEVICE not set")
	}
	b, desc, err := device.Open(spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(desc)
	for _, name := range archref.Dense {
		t.Run(name, func(t *testing.T) { testArchOn(t, fixtures.Dir(t, "archs", name), b, archref.Tolerance) })
	}
	modern := append(append(append(append([]string(nil), moeFixtures...), hybridFixtures...), ssmFixtures...), gemmaNext...)
	for _, name := range modern {
		t.Run(name, func(t *testing.T) { testArchOn(t, fixtures.Dir(t, "archs", name), b, deviceTolerance) })
	}
	t.Run("chat-model", func(t *testing.T) {
		dir := fixtures.Dir(t, "chat-model")
		m, err := Open(dir, Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		checkChatCases(t, m, loadChatCases(t, dir))
	})
}

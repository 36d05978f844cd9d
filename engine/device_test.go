package engine

import (
	"os"
	"testing"

	"lem/compute/device"
	"lem/internal/archref"
	"lem/internal/fixtures"
)

// TestConformanceOnDevice runs the dense conformance and the chat model
// through the engine (sessions, recorded decode graphs where the backend
// records them) on the device LEM_TEST_DEVICE names, such as "cuda". It is
// skipped when the variable is unset, as it is in CI, which has no GPU.
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
		t.Run(name, func(t *testing.T) { testArchOn(t, fixtures.Dir(t, "archs", name), b) })
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

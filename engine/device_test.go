package engine

import (
	"os"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/device"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

// deviceTolerance is the largest logit difference allowed on a device for
// the families that need the optional operations (mixture of experts,
// recurrences, per-row operations), which sum in another order there.
const deviceTolerance = 2e-3

// testDevice opens the device LEM_TEST_DEVICE names, skipping the test
// when it is unset (as in CI, which has no GPU).
func testDevice(t *testing.T) compute.Backend {
	t.Helper()
	spec := os.Getenv("LEM_TEST_DEVICE")
	if spec == "" {
		t.Skip("LEM_TEST_DEVICE not set")
	}
	b, desc, err := device.Open(spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(desc)
	return b
}

// TestConformanceOnDevice runs the dense and modern conformance and the
// chat model through the engine (sessions, recorded decode graphs where the
// backend records them) on the device LEM_TEST_DEVICE names, such as
// "cuda". It is skipped when the variable is unset, as it is in CI, which
// has no GPU.
func TestConformanceOnDevice(t *testing.T) {
	b := testDevice(t)
	for _, name := range archref.Dense {
		t.Run(name, func(t *testing.T) { testArchOn(t, fixtures.Dir(t, "archs", name), b, archref.Tolerance) })
	}
	modern := append(append(append(append([]string(nil), moeFixtures...), hybridFixtures...), ssmFixtures...), gemmaNext...)
	for _, name := range modern {
		t.Run(name, func(t *testing.T) { testArchOn(t, fixtures.Dir(t, "archs", name), b, deviceTolerance) })
	}
	for _, name := range append(append([]string(nil), hybridFixtures...), ssmFixtures...) {
		t.Run(name+"/turn after graph decode", func(t *testing.T) { testTurnAfterDecode(t, fixtures.Dir(t, "archs", name), b) })
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

// testTurnAfterDecode decodes a few tokens (recorded and replayed as a
// graph where the backend records them), then sends a follow-up turn that
// extends the conversation: the session must keep every token, prefill only
// the new ones and match a cold session run on the same backend.
func testTurnAfterDecode(t *testing.T, dir string, b compute.Backend) {
	m, err := model.OpenDir(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ref := archref.Load(t, dir)
	prompt := ref.InputIDs[:len(ref.InputIDs)/2]
	s := NewSession(m, b, 64)
	defer s.Close()
	logits, err := s.Append(prompt)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if logits, err = s.Append([]int32{argmax(logits)}); err != nil {
			t.Fatal(err)
		}
	}
	held := slices.Clone(s.tokens)
	next := append(slices.Clone(held), ref.InputIDs[len(ref.InputIDs)/2:]...)
	if kept := s.Reuse(next); kept != len(held) {
		t.Fatalf("Reuse kept %d of %d tokens", kept, len(held))
	}
	warm, err := s.Append(next[len(held):])
	if err != nil {
		t.Fatal(err)
	}
	c := NewSession(m, b, 64)
	defer c.Close()
	cold, err := c.Append(next)
	if err != nil {
		t.Fatal(err)
	}
	if d := archref.MaxDiff(warm, cold); d > deviceTolerance {
		t.Errorf("follow-up turn: max |Δlogit| against a cold run = %.2e", d)
	}
}

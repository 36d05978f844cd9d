package engine

import (
	"strings"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// TestOpenNeedsBackend checks that the caller chooses the backend: engine
// has no default device, and says so instead of picking one.
func TestOpenNeedsBackend(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	for _, tc := range []struct {
		name string
		open func() (*Model, error)
	}{
		{"Open", func() (*Model, error) { return Open(dir, Options{}) }},
		{"OpenTiny", func() (*Model, error) { return OpenTiny(Options{}) }},
	} {
		m, err := tc.open()
		if err == nil {
			m.Close()
			t.Errorf("%s without a backend: no error", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), "Options.Backend") {
			t.Errorf("%s without a backend: error %q does not name Options.Backend", tc.name, err)
		}
	}
}

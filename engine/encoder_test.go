package engine

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/model"
)

func TestOpenEncoder(t *testing.T) {
	dir := filepath.Join("..", "model", "testdata", "encoders", "xlm-roberta-cls")
	b := cpu.New(1)
	if _, err := Open(dir, Options{Backend: b}); !errors.Is(err, model.ErrEncoder) || !strings.Contains(err.Error(), "OpenEncoder") {
		t.Fatalf("Open of an encoder: %v, want model.ErrEncoder naming OpenEncoder", err)
	}
	e, err := OpenEncoder(dir, Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	out, err := e.Net.Encode([]model.EncoderInput{{IDs: []int32{0, 5, 7, 2}}, {IDs: []int32{0, 9, 2}, TypeIDs: []int32{0, 1, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	hid := e.Net.Config().HiddenSize
	for i, want := range []int{4, 3} {
		if len(out[i].Hidden) != want*hid || len(out[i].Logits) != 1 {
			t.Errorf("input %d: %d hidden values and %d logits, want %d and 1", i, len(out[i].Hidden), len(out[i].Logits), want*hid)
		}
	}
	if _, err := OpenEncoder(filepath.Join("..", "model", "testdata", "encoders", "nope"), Options{Backend: b}); err == nil {
		t.Error("OpenEncoder of a missing directory succeeded")
	}
	if _, err := OpenEncoder(dir, Options{}); !errors.Is(err, errNoBackend) {
		t.Errorf("OpenEncoder without a backend: %v", err)
	}
}

package engine

import (
	"context"
	"errors"
	"math"
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

func TestEncoderRunner(t *testing.T) {
	b := cpu.New(1)
	open := func(name string) *Encoder {
		e, err := OpenEncoder(filepath.Join("..", "model", "testdata", "encoders", name), Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	e := open("bert")
	if e.Embedding != (EmbedConfig{Pooling: PoolMean, Normalize: true}) {
		t.Errorf("embedding config without sentence-transformers files: %+v, want mean, normalised", e.Embedding)
	}
	inputs := [][]int32{{2, 5, 7, 3}, {2, 9, 3}, {2, 11, 12, 13, 14, 3}, {2, 3}}
	whole := NewEncoderRunner(e.Net, 0)
	small := NewEncoderRunner(e.Net, 5) // batches of at most 5 tokens: each input alone
	ctx := context.Background()
	for _, pool := range []Pooling{PoolFirst, PoolMean, PoolLast} {
		a, err := whole.Embed(ctx, inputs, pool)
		if err != nil {
			t.Fatal(err)
		}
		c, err := small.Embed(ctx, inputs, pool)
		if err != nil {
			t.Fatal(err)
		}
		for i := range inputs {
			out, err := e.Net.Encode([]model.EncoderInput{{IDs: inputs[i]}})
			if err != nil {
				t.Fatal(err)
			}
			dim := e.Net.Config().HiddenSize
			h, n := out[0].Hidden, len(inputs[i])
			for j := range dim {
				var want float64
				switch pool {
				case PoolFirst:
					want = float64(h[j])
				case PoolLast:
					want = float64(h[(n-1)*dim+j])
				default:
					for r := range n {
						want += float64(h[r*dim+j])
					}
					want /= float64(n)
				}
				if math.Abs(float64(a[i][j])-want) > 1e-4 || math.Abs(float64(c[i][j])-want) > 1e-4 {
					t.Fatalf("%v pooling, input %d, value %d: batched %g, one by one %g, want %g", pool, i, j, a[i][j], c[i][j], want)
				}
			}
		}
	}
	if _, err := whole.Score(ctx, inputs); err == nil || !strings.Contains(err.Error(), "0 labels") {
		t.Errorf("Score of a model without a head: %v", err)
	}
	if _, err := whole.Embed(ctx, [][]int32{{2, 999}}, PoolMean); err == nil {
		t.Error("Embed of an id outside the vocabulary succeeded")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := whole.Embed(cancelled, inputs, PoolMean); !errors.Is(err, context.Canceled) {
		t.Errorf("Embed with a cancelled context: %v", err)
	}
	r := NewEncoderRunner(open("xlm-roberta-cls").Net, 0)
	got, err := r.Score(ctx, inputs[:2])
	if err != nil || len(got) != 2 || got[0] == got[1] {
		t.Errorf("Score: %v %v", got, err)
	}
}

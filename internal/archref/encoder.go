package archref

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/lem-engine/lem/safetensors"
)

// Encoder names an encoder fixture of model/testdata/encoders and the
// number of labels of its classification head (0: none).
type Encoder struct {
	Name   string
	Labels int
}

// Encoders are the encoder fixtures.
var Encoders = []Encoder{
	{"bert", 0}, {"bert-cls", 3},
	{"xlm-roberta", 0}, {"xlm-roberta-cls", 1},
	{"modernbert", 0}, {"modernbert-cls", 2},
}

// EncoderReference is an encoder fixture's reference
// (scripts/encoder_fixtures.py): its inputs, and transformers' float32
// outputs for them.
type EncoderReference struct {
	IDs     [][]int32   // each input's token ids
	TypeIDs [][]int32   // each input's token type ids (nil where absent)
	Hidden  [][]float32 // each input's last hidden states
	Logits  [][]float32 // each input's logits; nil without a classification head
}

// LoadEncoder reads the reference.safetensors of the encoder fixture
// directory dir.
func LoadEncoder(tb testing.TB, dir string) *EncoderReference {
	tb.Helper()
	f, err := safetensors.Open(filepath.Join(dir, "reference.safetensors"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	ints := func(name string) []int32 {
		x, ok := f.Tensor(name)
		if !ok {
			return nil
		}
		if x.DType != safetensors.I32 {
			tb.Fatalf("%s: %s: dtype %v, want I32", dir, name, x.DType)
		}
		v := make([]int32, len(x.Data)/4)
		for i := range v {
			v[i] = int32(binary.LittleEndian.Uint32(x.Data[4*i:]))
		}
		return v
	}
	floats := func(name string) []float32 {
		x, ok := f.Tensor(name)
		if !ok {
			tb.Fatalf("%s: no tensor %s", dir, name)
		}
		v, err := x.Float32s()
		if err != nil {
			tb.Fatalf("%s: %s: %v", dir, name, err)
		}
		return v
	}
	ref := new(EncoderReference)
	for i := 0; ; i++ {
		ids := ints(fmt.Sprintf("ids.%d", i))
		if ids == nil {
			break
		}
		ref.IDs = append(ref.IDs, ids)
		ref.TypeIDs = append(ref.TypeIDs, ints(fmt.Sprintf("types.%d", i)))
		ref.Hidden = append(ref.Hidden, floats(fmt.Sprintf("hidden.%d", i)))
	}
	if x, ok := f.Tensor("logits"); ok {
		v := floats("logits")
		n := x.Shape[1]
		for i := range x.Shape[0] {
			ref.Logits = append(ref.Logits, v[i*n:(i+1)*n])
		}
	}
	if len(ref.IDs) == 0 {
		tb.Fatalf("%s: no reference inputs", dir)
	}
	return ref
}

package server

import (
	"github.com/lem-engine/lem/constrain"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/tokenizer"
)

// newJSONFactory returns a maker of constraints that hold output to one
// JSON object (response_format json_object). The table behind it is built
// once per model, on the first request that asks for JSON.
func newJSONFactory(tok *tokenizer.Tokenizer) (func(stopIDs []int32) engine.Constraint, error) {
	j, err := constrain.JSON(tok)
	if err != nil {
		return nil, err
	}
	return func(stopIDs []int32) engine.Constraint { return j.New(stopIDs) }, nil
}

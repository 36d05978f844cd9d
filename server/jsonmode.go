package server

import (
	"errors"

	"lem/engine"
	"lem/tokenizer"
)

// newJSONFactory returns a maker of constraints that hold output to one
// JSON value (response_format json_object). Stand-in until package
// constrain exists.
func newJSONFactory(tok *tokenizer.Tokenizer) (func(stopIDs []int32) engine.Constraint, error) {
	return nil, errors.New("JSON-constrained output is not available in this build")
}

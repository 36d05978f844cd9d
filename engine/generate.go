package engine

import (
	"context"
	"fmt"
	"time"

	"lem/compute/cpu"
)

func defaultBackend() *cpu.Backend { return cpu.New(0) }

// Request is one generation.
type Request struct {
	// Prompt is appended to the session before generating.
	Prompt []int32
	Sample SampleParams
	// MaxTokens bounds the number of generated tokens (0: until a stop
	// token or the end of the context).
	MaxTokens int
	// StopIDs end generation in addition to the model's (see Model.StopIDs);
	// IgnoreModelStops drops the model's.
	StopIDs          []int32
	IgnoreModelStops bool
}

// Stop reasons.
const (
	StopToken  = "stop"   // a stop token was generated
	StopLength = "length" // MaxTokens or the context was reached
)

// Result reports a finished generation.
type Result struct {
	IDs          []int32 // generated ids, the stop token excluded
	Text         string  // their decoding
	StopReason   string
	StopID       int32 // the stop token when StopReason is StopToken, else -1
	PromptTokens int
	Prefill      time.Duration
	Decode       time.Duration
}

// PrefillRate returns prompt tokens per second.
func (r *Result) PrefillRate() float64 { return rate(r.PromptTokens, r.Prefill) }

// DecodeRate returns generated tokens per second (the first token is part
// of the prefill).
func (r *Result) DecodeRate() float64 { return rate(len(r.IDs)-1, r.Decode) }

func rate(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Generate appends the prompt to the session and samples tokens until a
// stop token, MaxTokens or the end of the context. onText, when set,
// receives each text delta as the streaming detokenizer releases it (never
// splitting a character); an error from it ends generation with that error.
// Cancelling ctx ends generation with ctx's error; it is checked every token.
func (m *Model) Generate(ctx context.Context, s *Session, req Request, onText func(delta string) error) (*Result, error) {
	if len(req.Prompt) == 0 && s.Len() == 0 {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	stops := req.StopIDs
	if !req.IgnoreModelStops {
		stops = append(append([]int32(nil), m.StopIDs...), stops...)
	}
	res := &Result{PromptTokens: len(req.Prompt), StopID: -1, StopReason: StopLength}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	var logits []float32
	var err error
	if len(req.Prompt) > 0 {
		logits, err = s.Append(req.Prompt)
	} else {
		// Continue from the session's last token.
		last := s.tokens[len(s.tokens)-1]
		s.tokens = s.tokens[:len(s.tokens)-1]
		logits, err = s.Append([]int32{last})
	}
	if err != nil {
		return nil, err
	}
	res.Prefill = time.Since(t0)
	t1 := time.Now()
	sampler := NewSampler(req.Sample)
	stream := m.Tokenizer.NewStream()
	var text []byte
	emit := func(delta string) error {
		if delta == "" {
			return nil
		}
		text = append(text, delta...)
		if onText != nil {
			return onText(delta)
		}
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		id := sampler.Sample(logits, s.tokens)
		if contains(stops, id) {
			res.StopReason, res.StopID = StopToken, id
			break
		}
		res.IDs = append(res.IDs, id)
		if err := emit(stream.Next(id)); err != nil {
			return res, err
		}
		if req.MaxTokens > 0 && len(res.IDs) >= req.MaxTokens || s.Len() >= s.Capacity() {
			break
		}
		if logits, err = s.Append([]int32{id}); err != nil {
			return res, err
		}
	}
	if err := emit(stream.Flush()); err != nil {
		return res, err
	}
	res.Decode = time.Since(t1)
	res.Text = string(text)
	return res, nil
}

package engine

import (
	"context"
	"fmt"
	"math"
	"time"
)

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
	// Logprobs reports the log-probability of each chosen token and of the
	// TopLogprobs most likely tokens at its position. The probabilities are
	// the model's, before penalties, temperature and truncation.
	Logprobs    bool
	TopLogprobs int
	// Constraint, when set, restricts the tokens that may be sampled.
	Constraint Constraint
	// HostSampling reads every logit and samples on the host even where
	// the backend could pick the candidates itself (see pickK); the tokens
	// are the same, only slower. For measuring.
	HostSampling bool
}

// A Constraint restricts which tokens may come next (constrained decoding,
// such as output that must be JSON).
type Constraint interface {
	// Mask sets the logits of tokens that may not come next to -Inf.
	Mask(logits []float32)
	// Accept advances the constraint past the chosen token.
	Accept(id int32)
	// Done reports whether the output is complete; generation then stops
	// with StopToken and StopID -1.
	Done() bool
}

// Token is one generated token as a Generate callback sees it.
type Token struct {
	ID int32
	// Text is the text the streaming detokenizer releases with this token;
	// it may be empty (the token ends inside a character) or hold more than
	// the token's own text (earlier held-back bytes).
	Text string
	// Logprob and Top are set when Request.Logprobs is.
	Logprob float32
	Top     []TokenProb
}

// TokenProb is a token with its log-probability.
type TokenProb struct {
	ID      int32
	Logprob float32
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
	// CachedTokens is the prompt tokens reused from a Scheduler's prefix
	// cache rather than computed.
	CachedTokens int
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
// stop token, MaxTokens or the end of the context. onToken, when set,
// receives each token with the text the streaming detokenizer releases with
// it (never splitting a character); an error from it ends generation with
// that error. A final Token with ID -1 carries text held back at the end.
// Cancelling ctx ends generation with ctx's error; it is checked every token
// and during the prompt's prefill as Session.AppendContext does.
func (m *Model) Generate(ctx context.Context, s *Session, req Request, onToken func(Token) error) (*Result, error) {
	if len(req.Prompt) == 0 && s.Len() == 0 {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pick := pickK(s.b, &req, s.vocab)
	st := &sessionSteps{s: s, npick: pick, ahead: s.runsAhead(pick)}
	defer s.settle()
	return m.generate(ctx, st, req, onToken)
}

// steps runs the forward passes of one generation: a Session's, or a
// sequence's in a Scheduler's batches. Both return the logits of the last
// position run or, when pick() > 0, the backend's top candidates.
type steps interface {
	// prompt runs the request's prompt.
	prompt(ctx context.Context, prompt []int32) ([]float32, []candidate, error)
	// feed starts the step of a generated token; left is how many tokens
	// may still follow the one it picks (0: that token ends the generation
	// unless a stop ends it first). result waits for the step and returns
	// what prompt returns. The caller streams the token out between the
	// two, while a scheduler runs the step.
	feed(ctx context.Context, id int32, left int) error
	result(ctx context.Context) ([]float32, []candidate, error)
	// held returns the positions held, capacity the most there can be.
	held() int
	capacity() int
	// history returns the tokens held, for penalties.
	history() []int32
	// pick returns how many candidates the backend picks (pickK).
	pick() int
	// cached returns the prompt tokens the prompt step reused.
	cached() int
	// vocab returns the vocabulary size.
	vocab() int
}

// generate is Generate's loop over any steps.
func (m *Model) generate(ctx context.Context, st steps, req Request, onToken func(Token) error) (*Result, error) {
	stops := req.StopIDs
	if !req.IgnoreModelStops {
		stops = append(append([]int32(nil), m.StopIDs...), stops...)
	}
	res := &Result{PromptTokens: len(req.Prompt), StopID: -1, StopReason: StopLength}
	t0 := time.Now()
	pick := st.pick()
	// full reports whether generation ends by length with ids tokens out
	// and held positions in the session.
	full := func(ids, held int) bool {
		return req.MaxTokens > 0 && ids >= req.MaxTokens || held >= st.capacity()
	}
	logits, cands, err := st.prompt(ctx, req.Prompt)
	if err != nil {
		return nil, err
	}
	res.CachedTokens = st.cached()
	res.Prefill = time.Since(t0)
	t1 := time.Now()
	sampler := NewSampler(req.Sample)
	var stream interface {
		Next(int32) string
		Flush() string
	} = noText{}
	if m.Tokenizer != nil {
		stream = m.Tokenizer.NewStream()
	}
	var text []byte
	emit := func(t Token) error {
		text = append(text, t.Text...)
		if onToken != nil && (t.ID >= 0 || t.Text != "") {
			return onToken(t)
		}
		return nil
	}
	var lp *logprobs
	if req.Logprobs {
		lp = newLogprobs(st.vocab(), req.TopLogprobs)
	}
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if lp != nil {
			lp.observe(logits)
		}
		if c := req.Constraint; c != nil {
			if c.Done() {
				res.StopReason = StopToken
				break
			}
			c.Mask(logits)
		}
		var id int32
		if pick > 0 {
			id = sampler.sampleTop(cands)
		} else {
			id = sampler.Sample(logits, st.history())
		}
		if contains(stops, id) {
			res.StopReason, res.StopID = StopToken, id
			break
		}
		if req.Constraint != nil {
			req.Constraint.Accept(id)
		}
		res.IDs = append(res.IDs, id)
		tok := Token{ID: id, Text: stream.Next(id)}
		if lp != nil {
			tok.Logprob, tok.Top = lp.report(id)
		}
		last := full(len(res.IDs), st.held())
		if !last {
			// The token's step runs while the token streams out.
			left := st.capacity() - st.held() - 1
			if req.MaxTokens > 0 {
				left = min(left, req.MaxTokens-len(res.IDs)-1)
			}
			if err := st.feed(ctx, id, max(left, 0)); err != nil {
				return res, err
			}
		}
		if err := emit(tok); err != nil {
			return res, err
		}
		if last {
			break
		}
		if logits, cands, err = st.result(ctx); err != nil {
			return res, err
		}
	}
	if err := emit(Token{ID: -1, Text: stream.Flush()}); err != nil {
		return res, err
	}
	res.Decode = time.Since(t1)
	res.Text = string(text)
	return res, nil
}

// sessionSteps runs a generation's steps on a Session.
type sessionSteps struct {
	s     *Session
	npick int
	ahead bool
	// The token fed last, and the tokens that may follow it.
	id   int32
	left int
}

func (t *sessionSteps) run(ctx context.Context, tokens []int32, more bool) ([]float32, []candidate, error) {
	s := t.s
	switch {
	case t.ahead && len(tokens) == 1:
		cands, err := s.appendGreedy(tokens[0], more)
		return nil, cands, err
	case t.npick > 0:
		cands, err := s.appendTop(ctx, tokens, t.npick)
		return nil, cands, err
	}
	logits, err := s.AppendContext(ctx, tokens)
	return logits, nil, err
}

func (t *sessionSteps) prompt(ctx context.Context, prompt []int32) ([]float32, []candidate, error) {
	if len(prompt) > 0 {
		return t.run(ctx, prompt, false)
	}
	// Continue from the session's last token.
	s := t.s
	last := s.tokens[len(s.tokens)-1]
	s.tokens = s.tokens[:len(s.tokens)-1]
	return t.run(ctx, []int32{last}, false)
}

// feed keeps the token: a session runs its step in result, after the
// token has streamed out, since the step takes the caller's goroutine.
func (t *sessionSteps) feed(_ context.Context, id int32, left int) error {
	t.id, t.left = id, left
	return nil
}

func (t *sessionSteps) result(ctx context.Context) ([]float32, []candidate, error) {
	return t.run(ctx, []int32{t.id}, t.left > 0)
}

func (t *sessionSteps) held() int        { return t.s.Len() }
func (t *sessionSteps) capacity() int    { return t.s.Capacity() }
func (t *sessionSteps) history() []int32 { return t.s.tokens }
func (t *sessionSteps) pick() int        { return t.npick }
func (t *sessionSteps) cached() int      { return 0 }
func (t *sessionSteps) vocab() int       { return t.s.vocab }

// noText stands in for the streaming detokenizer of a model without a
// tokenizer.
type noText struct{}

func (noText) Next(int32) string { return "" }
func (noText) Flush() string     { return "" }

// logprobs computes the model's log-probabilities for Request.Logprobs.
type logprobs struct {
	logp []float32
	top  int
	s    Sampler
}

func newLogprobs(vocab, top int) *logprobs {
	return &logprobs{logp: make([]float32, vocab), top: top, s: Sampler{p: SampleParams{TopK: top}}}
}

// observe stores the log-softmax of the logits before sampling changes them.
func (l *logprobs) observe(logits []float32) {
	mx := logits[argmax(logits)]
	var sum float64
	for _, x := range logits {
		sum += math.Exp(float64(x - mx))
	}
	lse := mx + float32(math.Log(sum))
	for i, x := range logits {
		l.logp[i] = x - lse
	}
}

// report returns the chosen token's log-probability and the most likely
// tokens.
func (l *logprobs) report(id int32) (float32, []TokenProb) {
	var top []TokenProb
	if l.top > 0 {
		for _, c := range l.s.candidates(l.logp) {
			top = append(top, TokenProb{ID: c.id, Logprob: c.logit})
		}
	}
	return l.logp[id], top
}

// scoreChunk is the number of prompt positions PromptLogprobs runs per
// forward pass: their logits, scoreChunk × vocab floats, are held at once.
const scoreChunk = 32

// PromptLogprobs runs ids through s from its start (s is reset first) and
// returns, for each token after the first, its log-probability given the
// tokens before it and the top likeliest tokens at its position, as
// Generate reports them for generated tokens (Token.Text is empty). It
// checks ctx between chunks of positions; on an error s is reset.
func (m *Model) PromptLogprobs(ctx context.Context, s *Session, ids []int32, top int) ([]Token, error) {
	s.Reset()
	out := make([]Token, 0, max(len(ids)-1, 0))
	lp := newLogprobs(s.vocab, top)
	// Position j's logits give the probabilities of token j+1.
	for lo := 0; lo < len(ids)-1; lo += scoreChunk {
		if err := ctx.Err(); err != nil {
			s.Reset()
			return nil, err
		}
		hi := min(lo+scoreChunk, len(ids)-1)
		rows, err := s.AppendAll(ids[lo:hi])
		if err != nil {
			s.Reset()
			return nil, fmt.Errorf("scoring the prompt: %w", err)
		}
		for j, row := range rows {
			lp.observe(row)
			t := Token{ID: ids[lo+j+1]}
			t.Logprob, t.Top = lp.report(t.ID)
			out = append(out, t)
		}
	}
	return out, nil
}

package server

import (
	"fmt"
	"slices"
	"strings"
)

// Validation shared by every dialect. Each bound on a request is checked
// here, once, whatever the dialect; a dialect only converts its fields
// into a Request and names them (Request.MaxTokensParam, PromptParam,
// Params) so that errors speak the client's language. The bounds:
//
//	max_tokens       1 … MaxTokensLimit (0 where ZeroTokens allows it);
//	                 unset: up to the end of the context. With the
//	                 prompt it must fit the context, unless the dialect
//	                 takes it as a bound (MaxTokensBound), cut to what
//	                 the context leaves
//	n                1 … MaxChoices
//	top_logprobs     0 … MaxTopLogprobs
//	stop             at most MaxStops sequences of 1 … MaxStopLen bytes
//	temperature      0 … 100
//	top_p, min_p     0 … 1
//	top_k            -1 (off), 0 (off) or more
//	presence_penalty, frequency_penalty   -2 … 2
//	repetition_penalty                    0 … 10
//	logit_bias       -100 … 100, ids within the vocabulary
//	message roles    system, developer, user, assistant, tool (each
//	                 dialect first checks its own set: checkRole)

// param returns the dialect's name of the core field name.
func (r *Request) param(name string) string {
	if p, ok := r.Params[name]; ok {
		return p
	}
	return name
}

// checkRequest checks every bound of req that needs no prompt.
func (m *Model) checkRequest(req *Request) error {
	if req.N < 0 || req.N > MaxChoices {
		return invalid(req.param("n"), "must be between 1 and %d, got %d", MaxChoices, req.N)
	}
	if err := m.checkMaxTokens(req); err != nil {
		return err
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs {
		return invalid(req.param("top_logprobs"), "must be between 0 and %d, got %d", MaxTopLogprobs, req.TopLogprobs)
	}
	if err := checkSample(req); err != nil {
		return err
	}
	stop := req.param("stop")
	if len(req.Stop) > MaxStops {
		return invalid(stop, "at most %d stop sequences, got %d", MaxStops, len(req.Stop))
	}
	for i, s := range req.Stop {
		if s == "" || len(s) > MaxStopLen {
			return invalid(fmt.Sprintf("%s[%d]", stop, i), "a stop sequence must hold 1 to %d bytes, got %d", MaxStopLen, len(s))
		}
	}
	vocab := m.config().VocabSize
	for id := range req.Sample.LogitBias {
		if id < 0 || int(id) >= vocab {
			return invalid(req.param("logit_bias"), "token id %d is outside the vocabulary [0, %d)", id, vocab)
		}
	}
	if req.JSON && req.Schema != nil {
		return invalid(req.param("response_format"), "asks for both a JSON object and a JSON schema")
	}
	if req.ThinkingBudget < 0 {
		return invalid(req.param("thinking.budget_tokens"), "must not be negative, got %d", req.ThinkingBudget)
	}
	promptParam := param(req.PromptParam, "messages")
	for i, msg := range req.Messages {
		if msg.Role == "" {
			continue // normalizeMessages names it
		}
		if err := checkRole(msg.Role, fmt.Sprintf("%s[%d].role", promptParam, i), coreRoles); err != nil {
			return err
		}
	}
	return nil
}

// checkMaxTokens checks the token limit against its bounds. Whether it
// fits with the prompt is checked once the prompt is known
// (checkContext).
func (m *Model) checkMaxTokens(req *Request) error {
	name := param(req.MaxTokensParam, "max_tokens")
	n := req.MaxTokens
	switch {
	case !req.MaxTokensSet && n == 0:
		return nil
	case n == 0 && req.ZeroTokens:
		return nil
	case n < 1 && req.ZeroTokens:
		return invalid(name, "must not be negative, got %d", n)
	case n < 1:
		return invalid(name, "must be at least 1, got %d", n)
	case n > MaxTokensLimit:
		return invalid(name, "must be at most %d, got %d", MaxTokensLimit, n)
	}
	return nil
}

// MaxTokensLimit bounds a token limit on every dialect. It lies far past
// any context lem can hold (the KV cache of a million positions is tens
// of GB even for a small model), so that a limit above it is a mistake
// (10^12), not a bound to cut: dialects whose limits are bounds
// (Anthropic's max_tokens, Ollama's num_predict) take large values from
// clients that send their own model's maximum.
const MaxTokensLimit = 1 << 20

// checkSample rejects out-of-range sampling parameters. top_k -1 is
// taken as 0 (off), as vLLM and Ollama clients send it.
func checkSample(req *Request) error {
	s := &req.Sample
	bad := func(name, format string, args ...any) error { return invalid(req.param(name), format, args...) }
	switch {
	case s.Temperature < 0 || s.Temperature > 100 || s.Temperature != s.Temperature:
		return bad("temperature", "must be between 0 and 100, got %v", s.Temperature)
	case s.TopP < 0 || s.TopP > 1 || s.TopP != s.TopP:
		return bad("top_p", "must be between 0 and 1, got %v", s.TopP)
	case s.MinP < 0 || s.MinP > 1 || s.MinP != s.MinP:
		return bad("min_p", "must be between 0 and 1, got %v", s.MinP)
	case s.TopK < -1:
		return bad("top_k", "must be -1 (off), 0 (off) or positive, got %d", s.TopK)
	case s.PresencePenalty < -2 || s.PresencePenalty > 2 || s.PresencePenalty != s.PresencePenalty:
		return bad("presence_penalty", "must be between -2 and 2, got %v", s.PresencePenalty)
	case s.FrequencyPenalty < -2 || s.FrequencyPenalty > 2 || s.FrequencyPenalty != s.FrequencyPenalty:
		return bad("frequency_penalty", "must be between -2 and 2, got %v", s.FrequencyPenalty)
	case s.RepetitionPenalty < 0 || s.RepetitionPenalty > 10 || s.RepetitionPenalty != s.RepetitionPenalty:
		return bad("repetition_penalty", "must be between 0 and 10, got %v", s.RepetitionPenalty)
	}
	for _, b := range s.LogitBias {
		if b < -100 || b > 100 || b != b {
			return bad("logit_bias", "biases must be between -100 and 100, got %v", b)
		}
	}
	s.TopK = max(s.TopK, 0)
	return nil
}

// Roles of messages, as each dialect's clients may send them, and as the
// core takes them (a Request built in Go).
var (
	openaiRoles    = []string{"system", "developer", "user", "assistant", "tool", "function"}
	responsesRoles = []string{"system", "developer", "user", "assistant"}
	ollamaRoles    = []string{"system", "user", "assistant", "tool"}
	coreRoles      = []string{"system", "developer", "user", "assistant", "tool"}
)

// checkRole rejects a message role outside valid, naming the field where.
func checkRole(role, where string, valid []string) error {
	if role == "" {
		return invalid(where, "is required")
	}
	if !slices.Contains(valid, role) {
		return invalid(where, "unknown role %q; want one of %s", role, strings.Join(valid, ", "))
	}
	return nil
}

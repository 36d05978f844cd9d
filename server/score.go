package server

import (
	"context"
	"fmt"
	"math"
)

// scoreChunk is the number of prompt positions scored per forward pass:
// their logits, scoreChunk × vocab floats, are held at once.
const scoreChunk = 32

// scorePrompt runs p's prompt through the model from its start and
// returns each prompt token with its log-probability given the tokens
// before it and the p.req.TopLogprobs likeliest tokens at its position.
// The first token has none. It checks ctx between chunks.
func (m *Model) scorePrompt(ctx context.Context, p *Prepared) ([]TokenLogprob, error) {
	tok := m.eng.Tokenizer
	ids := p.ids
	out := make([]TokenLogprob, len(ids))
	for i, id := range ids {
		out[i] = TokenLogprob{ID: id, Token: tokenText(tok.Decode([]int32{id}, false))}
	}
	m.sess.Reset()
	logp := []float32(nil)
	// Position j's logits give the probabilities of token j+1.
	for lo := 0; lo < len(ids)-1; lo += scoreChunk {
		if err := ctx.Err(); err != nil {
			m.sess.Reset()
			return nil, err
		}
		hi := min(lo+scoreChunk, len(ids)-1)
		rows, err := m.sess.AppendAll(ids[lo:hi])
		if err != nil {
			m.sess.Reset()
			return nil, fmt.Errorf("scoring the prompt: %w", err)
		}
		for j, row := range rows {
			logp = logSoftmax(logp, row)
			next := &out[lo+j+1]
			next.Logprob = logp[next.ID]
			for _, c := range topTokens(logp, p.req.TopLogprobs) {
				next.Top = append(next.Top, TopLogprob{ID: c, Token: tokenText(tok.Decode([]int32{c}, false)), Logprob: logp[c]})
			}
		}
	}
	return out, nil
}

// logSoftmax writes the log-softmax of logits into dst, grown as needed.
func logSoftmax(dst, logits []float32) []float32 {
	if cap(dst) < len(logits) {
		dst = make([]float32, len(logits))
	}
	dst = dst[:len(logits)]
	mx := float32(math.Inf(-1))
	for _, x := range logits {
		mx = max(mx, x)
	}
	var sum float64
	for _, x := range logits {
		sum += math.Exp(float64(x - mx))
	}
	lse := mx + float32(math.Log(sum))
	for i, x := range logits {
		dst[i] = x - lse
	}
	return dst
}

// topTokens returns the ids of the k largest values, largest first (ties
// to the lower id).
func topTokens(v []float32, k int) []int32 {
	k = min(k, len(v))
	if k <= 0 {
		return nil
	}
	top := make([]int32, 0, k)
	for i, x := range v {
		if len(top) == k && x <= v[top[k-1]] {
			continue
		}
		j := len(top)
		if j < k {
			top = append(top, 0)
		} else {
			j--
		}
		for j > 0 && x > v[top[j-1]] {
			top[j] = top[j-1]
			j--
		}
		top[j] = int32(i)
	}
	return top
}

package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/model"
)

// Embeddings and reranking, the dialect-neutral part: the OpenAI
// (/v1/embeddings), Ollama (/api/embed, /api/embeddings), Cohere/Jina
// (/v1/rerank) and vLLM (/v1/score) routes decode their requests into an
// EmbedRequest or a RerankRequest and call Model.Embed or Model.Rerank.
//
// A decoder model's embedding is its final hidden states (after the final
// norm, before the output head) pooled as its sentence-transformers files
// say (engine.LoadEmbedConfig), else from the last token and normalised.
// The inputs of one request run batched as sequences of the model's
// scheduler, beside the generations of other requests; the request holds
// one place of the model's queue like a generation.
//
// An encoder model (NewEncoderModel: BERT, XLM-RoBERTa, ModernBERT) has no
// scheduler: a request's inputs, each with the tokenizer's special tokens
// ([CLS] … [SEP], <s> … </s>), go to the encoder in batches of up to
// engine.DefaultEncodeTokens tokens per Encode call, one request at a time,
// and are pooled as the model's sentence-transformers files say (CLS for
// BGE, mean for e5; mean without them) and normalised. Its generation
// routes answer 400 ("… is an embedding model"), and Ollama's /api/show
// gives it the one capability "embedding".
//
// Reranking scores each document against the query: with a cross-encoder
// (an encoder model with a classification head of one label, as
// bge-reranker and the ms-marco MiniLM models have) the score is the
// sigmoid of the head's logit for the pair (query, document), a relevance
// in (0, 1) as Cohere's and Jina's APIs return and as TEI, vLLM and
// sentence-transformers' CrossEncoder give for one-label heads (a
// two-label head's softmax probability of its second label); with a
// Qwen3-Reranker style model (a decoder whose directory or file name says
// "reranker" and whose vocabulary has "yes" and "no" tokens) the score is
// the probability of "yes" against "no" at the last position of its
// judgement prompt; with any other model it is the cosine similarity of
// the query's and the document's embeddings.

// Limits of one embedding or rerank request.
const (
	// maxEmbedInputs bounds the inputs (or documents) of one request, as
	// OpenAI does.
	maxEmbedInputs = 2048
	// maxEmbedTokens bounds the tokens of one request, all inputs
	// together.
	maxEmbedTokens = 1 << 18
)

// EmbedRequest is one request for embeddings.
type EmbedRequest struct {
	// Texts or IDs are the inputs: texts to tokenize, or token ids.
	Texts []string
	IDs   [][]int32
	// Truncate cuts an input longer than the context to its first
	// context-length tokens (Ollama's truncate); otherwise it is a 400.
	Truncate bool
	// Dimensions truncates each embedding to its first Dimensions values
	// and normalises it again (Matryoshka embeddings); 0 keeps them all.
	Dimensions int
	// InputParam and DimensionsParam name the fields in errors.
	InputParam, DimensionsParam string
}

// EmbedResult is the answer to an EmbedRequest.
type EmbedResult struct {
	// Embeddings holds one vector per input, in order.
	Embeddings [][]float32
	// PromptTokens counts the tokens of every input.
	PromptTokens int
	// Duration is the time from the request's arrival at Embed to its
	// end, queue included.
	Duration time.Duration
}

// embedder returns the model's source of pooled hidden states.
func (m *Model) embedder() engine.Embedder {
	if m.enc != nil {
		return m.enc
	}
	return m.sched
}

// embedInputs tokenizes the request's inputs and checks them against the
// limits.
func (m *Model) embedInputs(req *EmbedRequest) ([][]int32, int, error) {
	param := cmpOr(req.InputParam, "input")
	n := max(len(req.Texts), len(req.IDs))
	switch {
	case n == 0:
		return nil, 0, invalid(param, "is empty; want at least one input")
	case n > maxEmbedInputs:
		return nil, 0, invalid(param, "has %d inputs; at most %d are allowed per request", n, maxEmbedInputs)
	}
	limit := m.ctxLen
	vocab := m.config().VocabSize
	out := make([][]int32, 0, n)
	total := 0
	for i := range n {
		var ids []int32
		if req.Texts != nil {
			if req.Texts[i] == "" {
				return nil, 0, invalid(fmt.Sprintf("%s[%d]", param, i), "is an empty string")
			}
			var ok bool
			ids, ok = m.eng.Tokenizer.EncodePlainLimit(req.Texts[i], true, limit)
			if !ok && !req.Truncate {
				return nil, 0, &Error{Status: http.StatusBadRequest, Code: CodeContextExceeded, Param: fmt.Sprintf("%s[%d]", param, i),
					Message: fmt.Sprintf("the input has more than %d tokens, the model's context length", limit)}
			}
		} else {
			ids = req.IDs[i]
			if len(ids) == 0 {
				return nil, 0, invalid(fmt.Sprintf("%s[%d]", param, i), "is an empty array of token ids")
			}
			for _, id := range ids {
				if id < 0 || int(id) >= vocab {
					return nil, 0, invalid(fmt.Sprintf("%s[%d]", param, i), "token id %d is out of the vocabulary [0, %d)", id, vocab)
				}
			}
			if len(ids) > limit && !req.Truncate {
				return nil, 0, &Error{Status: http.StatusBadRequest, Code: CodeContextExceeded, Param: fmt.Sprintf("%s[%d]", param, i),
					Message: fmt.Sprintf("the input has %d tokens, more than the model's context length of %d", len(ids), limit)}
			}
		}
		if len(ids) > limit {
			ids = ids[:limit]
			if end, ok := m.closingToken(); ok && req.Texts != nil {
				// An encoder's input keeps its closing [SEP] or </s>, as
				// sentence-transformers and TEI truncate.
				ids[limit-1] = end
			}
		}
		if len(ids) == 0 {
			return nil, 0, invalid(fmt.Sprintf("%s[%d]", param, i), "encodes to no tokens")
		}
		total += len(ids)
		if total > maxEmbedTokens {
			return nil, 0, tooManyTokens(param, "inputs")
		}
		out = append(out, ids)
	}
	return out, total, nil
}

// Embed returns the embeddings of the request's inputs. It waits for a
// place in the model's queue like a generation, runs the inputs batched on
// the model's scheduler, and stops when ctx ends (the client went away).
// Errors are *Error values for the client's mistakes.
func (m *Model) Embed(ctx context.Context, req EmbedRequest) (*EmbedResult, error) {
	start := time.Now()
	ids, total, err := m.embedInputs(&req)
	if err != nil {
		return nil, err
	}
	src := m.embedder()
	if req.Dimensions < 0 || req.Dimensions > src.EmbedDim() {
		return nil, invalid(cmpOr(req.DimensionsParam, "dimensions"), "must be between 1 and the model's embedding size %d, got %d", src.EmbedDim(), req.Dimensions)
	}
	vecs, err := m.runEmbed(ctx, ids, total)
	if err != nil {
		return nil, err
	}
	cfg := m.eng.Embedding
	for i := range vecs {
		vecs[i] = engine.FinishEmbedding(vecs[i], req.Dimensions, cfg.Normalize || req.Dimensions > 0)
	}
	return &EmbedResult{Embeddings: vecs, PromptTokens: total, Duration: time.Since(start)}, nil
}

// closingToken returns the special token an encoder model's tokenizer
// ends a text with ([SEP], </s>), and whether it has one.
func (m *Model) closingToken() (int32, bool) {
	if m.enc == nil {
		return 0, false
	}
	ids, _ := m.eng.Tokenizer.EncodeSpecial("")
	if len(ids) < 2 {
		return 0, false
	}
	return ids[len(ids)-1], true
}

// tooManyTokens is the error of a request whose inputs (what names them)
// have more than maxEmbedTokens tokens together.
func tooManyTokens(param, what string) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Param: param,
		Message: fmt.Sprintf("the %s have more than %d tokens together, the most one request may have", what, maxEmbedTokens)}
}

// runEmbed runs the pooled hidden states of ids through the queue and the
// scheduler, counting them in the metrics.
func (m *Model) runEmbed(ctx context.Context, ids [][]int32, total int) ([][]float32, error) {
	return runQueued(ctx, m, len(ids), total, func() ([][]float32, error) {
		return m.embedder().Embed(ctx, ids, m.eng.Embedding.Pooling)
	})
}

// runQueued runs fn holding a place in m's queue, counting its inputs and
// their total tokens in the metrics; a failure of fn becomes what the
// client sees (see engineError).
func runQueued[T any](ctx context.Context, m *Model, inputs, total int, fn func() (T, error)) (T, error) {
	var zero T
	if err := m.wait(ctx, nil); err != nil {
		return zero, err
	}
	defer m.q.release()
	m.obs.promptTokens.Add(float64(total))
	m.obs.embedInputs.Add(float64(inputs))
	m.obs.embedTokens.Add(float64(total))
	v, err := fn()
	if err != nil {
		return zero, engineError(ctx, err)
	}
	return v, nil
}

// engineError turns a failure of the scheduler into what the client sees:
// the context's error when it ended, else the error itself (a 500).
func engineError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, engine.ErrSchedulerClosed) {
		return errShuttingDown
	}
	return fmt.Errorf("embedding: %w", err)
}

// cmpOr returns a, or b when a is empty.
func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// RerankRequest asks for the relevance of documents to a query.
type RerankRequest struct {
	Query     string
	Documents []string
	// Queries, when set, pairs query i with document i (vLLM's score of
	// two lists) instead of Query with every document.
	Queries []string
	// Instruction is the task a Qwen3-Reranker judges by; empty takes
	// the model's default.
	Instruction string
	// QueryParam and DocumentsParam name the fields in errors.
	QueryParam, DocumentsParam string
}

// RerankResult holds one score per document, in the documents' order.
type RerankResult struct {
	Scores       []float64
	PromptTokens int
}

// Rerank scores each document against the query: a Qwen3-Reranker's
// probability of "yes", else the cosine similarity of embeddings (see the
// top of this file).
func (m *Model) Rerank(ctx context.Context, req RerankRequest) (*RerankResult, error) {
	qp, dp := cmpOr(req.QueryParam, "query"), cmpOr(req.DocumentsParam, "documents")
	queries := req.Queries
	if queries == nil {
		queries = []string{req.Query}
	}
	switch {
	case req.Queries != nil && len(req.Queries) != len(req.Documents):
		return nil, invalid(qp, "has %d texts for %d documents", len(req.Queries), len(req.Documents))
	case slices.Contains(queries, ""):
		return nil, invalid(qp, "is required")
	case len(req.Documents) == 0:
		return nil, invalid(dp, "is empty; want at least one document")
	case len(req.Documents) > maxEmbedInputs:
		return nil, invalid(dp, "has %d documents; at most %d are allowed per request", len(req.Documents), maxEmbedInputs)
	}
	if m.enc != nil && (m.enc.Labels() == 1 || m.enc.Labels() == 2) {
		return m.rerankCross(ctx, req, queries)
	}
	if yes, no, ok := m.judge(); ok {
		return m.rerankJudge(ctx, req, queries, yes, no)
	}
	// The queries' embeddings first, then the documents'.
	texts := slices.Concat(queries, req.Documents)
	if len(texts) > maxEmbedInputs {
		return nil, invalid(dp, "has %d documents and queries together; at most %d are allowed per request", len(texts), maxEmbedInputs)
	}
	ids, total, err := m.embedInputs(&EmbedRequest{Texts: texts, Truncate: true, InputParam: dp})
	if err != nil {
		return nil, err
	}
	vecs, err := m.runEmbed(ctx, ids, total)
	if err != nil {
		return nil, err
	}
	nq := len(queries)
	res := &RerankResult{PromptTokens: total}
	for i, d := range vecs[nq:] {
		q := engine.FinishEmbedding(vecs[min(i, nq-1)], 0, true)
		d = engine.FinishEmbedding(d, 0, true)
		var dot float64
		for i := range d {
			dot += float64(q[i]) * float64(d[i])
		}
		res.Scores = append(res.Scores, dot)
	}
	return res, nil
}

// rerankCross scores each (query, document) pair with the encoder's
// classification head: sigmoid of its relevance logit. A pair longer than
// the model's context loses the end of the document, as TEI and
// sentence-transformers truncate.
func (m *Model) rerankCross(ctx context.Context, req RerankRequest, queries []string) (*RerankResult, error) {
	qp, dp := cmpOr(req.QueryParam, "query"), cmpOr(req.DocumentsParam, "documents")
	tok := m.eng.Tokenizer
	inputs := make([]model.EncoderInput, len(req.Documents))
	total := 0
	for i, d := range req.Documents {
		if d == "" {
			return nil, invalid(fmt.Sprintf("%s[%d]", dp, i), "is an empty string")
		}
		ids, types := tok.EncodePair(queries[min(i, len(queries)-1)], d)
		if len(ids) > m.ctxLen {
			q := tok.Encode(queries[min(i, len(queries)-1)], false)
			if len(q)+tok.PairTokens() >= m.ctxLen {
				return nil, &Error{Status: http.StatusBadRequest, Code: CodeContextExceeded, Param: qp,
					Message: fmt.Sprintf("the query takes %d tokens, leaving no room for a document in the model's context length of %d", len(q), m.ctxLen)}
			}
			ids, types = truncatePair(ids, types, m.ctxLen)
		}
		total += len(ids)
		if total > maxEmbedTokens {
			return nil, tooManyTokens(dp, "documents")
		}
		inputs[i] = model.EncoderInput{IDs: ids, TypeIDs: types}
	}
	logits, err := runQueued(ctx, m, len(inputs), total, func() ([]float32, error) {
		return m.enc.ScorePairs(ctx, inputs)
	})
	if err != nil {
		return nil, err
	}
	res := &RerankResult{PromptTokens: total}
	for _, l := range logits {
		res.Scores = append(res.Scores, 1/(1+math.Exp(-float64(l))))
	}
	return res, nil
}

// truncatePair cuts an encoded pair to limit tokens by dropping tokens of
// the second text (those typed like the last token, before the closing
// special tokens). The pair's layout keeps its special tokens: the tokens
// after the cut are the template's last ones.
func truncatePair(ids, types []int32, limit int) ([]int32, []int32) {
	over := len(ids) - limit
	// The closing special token(s): keep the last one, which every pair
	// template ends with ([SEP], </s>).
	tail := 1
	cut := len(ids) - tail - over
	return append(ids[:cut:cut], ids[len(ids)-tail:]...), append(types[:cut:cut], types[len(types)-tail:]...)
}

// judge returns the "yes" and "no" token ids of a Qwen3-Reranker style
// model, and whether the model is one.
func (m *Model) judge() (yes, no int32, ok bool) {
	name := strings.ToLower(filepath.Base(strings.TrimRight(m.eng.Name, "/")))
	if !strings.Contains(name, "rerank") || m.eng.Tokenizer == nil {
		return 0, 0, false
	}
	y := m.eng.Tokenizer.Encode("yes", false)
	n := m.eng.Tokenizer.Encode("no", false)
	if len(y) != 1 || len(n) != 1 {
		return 0, 0, false
	}
	return y[0], n[0], true
}

// defaultRerankInstruction is Qwen3-Reranker's documented default task.
const defaultRerankInstruction = "Given a web search query, retrieve relevant passages that answer the query"

// The parts of Qwen3-Reranker's documented prompt: the model's markup
// around the instruction, the query and the document.
const (
	judgeHead = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. " +
		"Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
	judgeTail = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
)

// rerankJudge scores by a yes/no judgement model.
func (m *Model) rerankJudge(ctx context.Context, req RerankRequest, queries []string, yes, no int32) (*RerankResult, error) {
	instr := cmpOr(req.Instruction, defaultRerankInstruction)
	tok := m.eng.Tokenizer
	inputs := make([][]int32, len(req.Documents))
	total := 0
	for i, d := range req.Documents {
		// The markup is the model's own; the client's text is plain
		// (special tokens written in it stay text).
		ids := slices.Concat(tok.Encode(judgeHead, false),
			tok.EncodePlain("<Instruct>: "+instr+"\n<Query>: "+queries[min(i, len(queries)-1)]+"\n<Document>: "+d, false),
			tok.Encode(judgeTail, false))
		if len(ids) > m.ctxLen {
			return nil, &Error{Status: http.StatusBadRequest, Code: CodeContextExceeded, Param: fmt.Sprintf("%s[%d]", cmpOr(req.DocumentsParam, "documents"), i),
				Message: fmt.Sprintf("the query and document take %d tokens, more than the model's context length of %d", len(ids), m.ctxLen)}
		}
		total += len(ids)
		if total > maxEmbedTokens {
			return nil, tooManyTokens(cmpOr(req.DocumentsParam, "documents"), "documents")
		}
		inputs[i] = ids
	}
	rows, err := runQueued(ctx, m, len(inputs), total, func() ([][]float32, error) {
		return m.sched.LastLogits(ctx, inputs, []int32{yes, no})
	})
	if err != nil {
		return nil, err
	}
	res := &RerankResult{PromptTokens: total}
	for _, r := range rows {
		// softmax over {yes, no}: P(yes) = 1/(1+exp(no−yes)).
		res.Scores = append(res.Scores, 1/(1+math.Exp(float64(r[1])-float64(r[0]))))
	}
	return res, nil
}

// rankOrder returns the documents' indices by score, highest first (ties
// in the documents' order), cut to topN when 0 < topN.
func rankOrder(scores []float64, topN int) []int {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return scores[idx[a]] > scores[idx[b]] })
	if topN > 0 && topN < len(idx) {
		idx = idx[:topN]
	}
	return idx
}

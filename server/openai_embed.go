package server

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"time"
)

// oaEmbeddingRequest is the body of POST /v1/embeddings.
type oaEmbeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format,omitempty"`
	Dimensions     *int            `json:"dimensions,omitempty"`
	User           string          `json:"user,omitempty"`
}

// oaEmbedding is one embedding of the response: Embedding is a []float32,
// or the base64 of its little-endian float32 bytes.
type oaEmbedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type oaEmbeddingResponse struct {
	Object string        `json:"object"`
	Data   []oaEmbedding `json:"data"`
	Model  string        `json:"model"`
	Usage  oaEmbedUsage  `json:"usage"`
}

type oaEmbedUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// embedInputJSON decodes OpenAI's input (see textsOrIDs), which may not
// hold an empty string.
func embedInputJSON(raw json.RawMessage, param string) ([]string, [][]int32, *Error) {
	texts, ids, e := textsOrIDs(raw, param)
	if e != nil {
		return nil, nil, e
	}
	if len(texts) == 1 && texts[0] == "" {
		return nil, nil, invalid(param, "is an empty string")
	}
	return texts, ids, nil
}

// base64Floats returns the base64 of v as little-endian float32 values,
// OpenAI's encoding_format "base64".
func base64Floats(v []float32) string {
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(buf)
}

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	var o oaEmbeddingRequest
	m := s.readForModel(w, r, &o, &o.Model, openaiErrors)
	if m == nil {
		return
	}
	if o.EncodingFormat != "" && o.EncodingFormat != "float" && o.EncodingFormat != "base64" {
		openaiErrors(w, invalid("encoding_format", "must be \"float\" or \"base64\", got %q", o.EncodingFormat))
		return
	}
	texts, ids, e := embedInputJSON(o.Input, "input")
	if e != nil {
		openaiErrors(w, e)
		return
	}
	req := EmbedRequest{Texts: texts, IDs: ids}
	if o.Dimensions != nil {
		if *o.Dimensions < 1 {
			openaiErrors(w, invalid("dimensions", "must be at least 1, got %d", *o.Dimensions))
			return
		}
		req.Dimensions = *o.Dimensions
	}
	res, err := m.Embed(r.Context(), req)
	if err != nil {
		s.embedError(w, r, err, openaiErrors)
		return
	}
	out := oaEmbeddingResponse{Object: "list", Model: m.id, Usage: oaEmbedUsage{res.PromptTokens, res.PromptTokens}}
	for i, v := range res.Embeddings {
		var emb any = v
		if o.EncodingFormat == "base64" {
			emb = base64Floats(v)
		}
		out.Data = append(out.Data, oaEmbedding{Object: "embedding", Index: i, Embedding: emb})
	}
	writeJSON(w, http.StatusOK, out)
}

// embedError writes an error of Embed or Rerank: nothing when the client
// went away, the *Error as it is, and a logged 500 otherwise.
func (s *Server) embedError(w http.ResponseWriter, r *http.Request, err error, ew errorWriter) {
	if r.Context().Err() != nil {
		return
	}
	if _, ok := err.(*Error); !ok {
		s.log.Error("embedding failed", "path", r.URL.Path, "error", err)
	}
	ew(w, AsError(err))
}

// rerankRequest is the body of POST /v1/rerank, in the shape Cohere and
// Jina share.
type rerankRequest struct {
	Model           string            `json:"model"`
	Query           string            `json:"query"`
	Documents       []json.RawMessage `json:"documents"`
	TopN            *int              `json:"top_n,omitempty"`
	ReturnDocuments *bool             `json:"return_documents,omitempty"`
	// Instruction is the task of a Qwen3-Reranker style model.
	Instruction string `json:"instruction,omitempty"`
}

type rerankDocument struct {
	Text string `json:"text"`
}

type rerankResult struct {
	Index          int             `json:"index"`
	RelevanceScore float64         `json:"relevance_score"`
	Document       *rerankDocument `json:"document,omitempty"`
}

type rerankResponse struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Results []rerankResult `json:"results"`
	Usage   oaEmbedUsage   `json:"usage"`
}

// rerankDocs decodes documents given as strings or {"text": …} objects.
func rerankDocs(raw []json.RawMessage) ([]string, *Error) {
	docs := make([]string, len(raw))
	for i, d := range raw {
		var s string
		if json.Unmarshal(d, &s) == nil {
			docs[i] = s
			continue
		}
		var o rerankDocument
		if json.Unmarshal(d, &o) != nil {
			return nil, invalid("documents", "document %d: want a string or an object with \"text\"", i)
		}
		docs[i] = o.Text
	}
	for i, d := range docs {
		if d == "" {
			return nil, invalid("documents", "document %d is empty", i)
		}
	}
	return docs, nil
}

func (s *Server) rerank(w http.ResponseWriter, r *http.Request) {
	var o rerankRequest
	m := s.readForModel(w, r, &o, &o.Model, openaiErrors)
	if m == nil {
		return
	}
	docs, e := rerankDocs(o.Documents)
	if e != nil {
		openaiErrors(w, e)
		return
	}
	topN := 0
	if o.TopN != nil {
		if *o.TopN < 1 {
			openaiErrors(w, invalid("top_n", "must be at least 1, got %d", *o.TopN))
			return
		}
		topN = *o.TopN
	}
	res, err := m.Rerank(r.Context(), RerankRequest{Query: o.Query, Documents: docs, Instruction: o.Instruction})
	if err != nil {
		s.embedError(w, r, err, openaiErrors)
		return
	}
	out := rerankResponse{ID: NewID("rerank-"), Model: m.id, Usage: oaEmbedUsage{res.PromptTokens, res.PromptTokens}}
	for _, i := range rankOrder(res.Scores, topN) {
		rr := rerankResult{Index: i, RelevanceScore: res.Scores[i]}
		if o.ReturnDocuments != nil && *o.ReturnDocuments {
			rr.Document = &rerankDocument{Text: docs[i]}
		}
		out.Results = append(out.Results, rr)
	}
	writeJSON(w, http.StatusOK, out)
}

// scoreRequest is the body of POST /v1/score in vLLM's shape: text_1 and
// text_2 are strings or lists; one text_1 against a list of text_2, or two
// lists of the same length pair by pair.
type scoreRequest struct {
	Model       string          `json:"model"`
	Text1       json.RawMessage `json:"text_1"`
	Text2       json.RawMessage `json:"text_2"`
	Instruction string          `json:"instruction,omitempty"`
}

type scoreData struct {
	Index  int     `json:"index"`
	Object string  `json:"object"`
	Score  float64 `json:"score"`
}

type scoreResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Data    []scoreData  `json:"data"`
	Usage   oaEmbedUsage `json:"usage"`
}

// textList decodes a string or a non-empty list of strings.
func textList(raw json.RawMessage, param string) ([]string, *Error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, invalid(param, "is empty")
		}
		return []string{s}, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) != nil || len(ss) == 0 {
		return nil, invalid(param, "want a string or a non-empty array of strings")
	}
	for i, t := range ss {
		if t == "" {
			return nil, invalid(param, "text %d is empty", i)
		}
	}
	return ss, nil
}

func (s *Server) score(w http.ResponseWriter, r *http.Request) {
	var o scoreRequest
	m := s.readForModel(w, r, &o, &o.Model, openaiErrors)
	if m == nil {
		return
	}
	t1, e := textList(o.Text1, "text_1")
	if e != nil {
		openaiErrors(w, e)
		return
	}
	t2, e := textList(o.Text2, "text_2")
	if e != nil {
		openaiErrors(w, e)
		return
	}
	if len(t1) != 1 && len(t1) != len(t2) {
		openaiErrors(w, invalid("text_1", "has %d texts and text_2 %d: want one text_1, or as many as text_2", len(t1), len(t2)))
		return
	}
	req := RerankRequest{Query: t1[0], Documents: t2, Instruction: o.Instruction, QueryParam: "text_1", DocumentsParam: "text_2"}
	if len(t1) > 1 {
		req.Queries = t1
	}
	res, err := m.Rerank(r.Context(), req)
	if err != nil {
		s.embedError(w, r, err, openaiErrors)
		return
	}
	scores, tokens := res.Scores, res.PromptTokens
	out := scoreResponse{ID: NewID("score-"), Object: "list", Created: time.Now().Unix(), Model: m.id, Usage: oaEmbedUsage{tokens, tokens}}
	for i, sc := range scores {
		out.Data = append(out.Data, scoreData{Index: i, Object: "score", Score: sc})
	}
	writeJSON(w, http.StatusOK, out)
}

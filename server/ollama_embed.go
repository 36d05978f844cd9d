package server

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// ollamaEmbedRequest is the body of POST /api/embed.
type ollamaEmbedRequest struct {
	Model      string          `json:"model"`
	Input      json.RawMessage `json:"input"`
	Truncate   *bool           `json:"truncate,omitempty"`
	Dimensions int             `json:"dimensions,omitempty"`
	KeepAlive  any             `json:"keep_alive,omitempty"`
	Options    map[string]any  `json:"options,omitempty"`
}

type ollamaEmbedResponse struct {
	Model           string      `json:"model"`
	Embeddings      [][]float32 `json:"embeddings"`
	TotalDuration   int64       `json:"total_duration"`
	LoadDuration    int64       `json:"load_duration"`
	PromptEvalCount int         `json:"prompt_eval_count"`
}

// ollamaInputs decodes Ollama's input: a string or an array of strings.
// A missing or empty input is no input (Ollama answers it with no
// embeddings, which clients use to load a model); an empty string in an
// array is an error.
func ollamaInputs(raw json.RawMessage) ([]string, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return []string{s}, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) != nil {
		return nil, invalid("input", "want a string or an array of strings")
	}
	for i, t := range ss {
		if t == "" {
			return nil, invalid("input", "input %d is an empty string", i)
		}
	}
	return ss, nil
}

func (s *Server) ollamaEmbed(w http.ResponseWriter, r *http.Request) {
	var o ollamaEmbedRequest
	if err := s.readJSON(r, &o); err != nil {
		ollamaErrors(w, err)
		return
	}
	m, err := s.ollamaModelFor(r, o.Model, rawKeepAlive(o.KeepAlive))
	if err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	texts, e := ollamaInputs(o.Input)
	if e != nil {
		ollamaErrors(w, e)
		return
	}
	if o.Dimensions < 0 {
		ollamaErrors(w, invalid("dimensions", "must not be negative, got %d", o.Dimensions))
		return
	}
	out := ollamaEmbedResponse{Model: ollamaName(m.id), Embeddings: [][]float32{}}
	if len(texts) == 0 {
		writeJSON(w, http.StatusOK, out)
		return
	}
	res, err := m.Embed(r.Context(), EmbedRequest{Texts: texts, Truncate: o.Truncate == nil || *o.Truncate, Dimensions: o.Dimensions})
	if err != nil {
		s.embedError(w, r, err, ollamaErrors)
		return
	}
	out.Embeddings = res.Embeddings
	out.TotalDuration = res.Duration.Nanoseconds()
	out.PromptEvalCount = res.PromptTokens
	writeJSON(w, http.StatusOK, out)
}

// ollamaEmbeddingsRequest is the body of the older POST /api/embeddings.
type ollamaEmbeddingsRequest struct {
	Model     string         `json:"model"`
	Prompt    string         `json:"prompt"`
	KeepAlive any            `json:"keep_alive,omitempty"`
	Options   map[string]any `json:"options,omitempty"`
}

func (s *Server) ollamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	var o ollamaEmbeddingsRequest
	if err := s.readJSON(r, &o); err != nil {
		ollamaErrors(w, err)
		return
	}
	m, err := s.ollamaModelFor(r, o.Model, rawKeepAlive(o.KeepAlive))
	if err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	if o.Prompt == "" {
		// As Ollama: no prompt, no embedding (a client loading the model).
		writeJSON(w, http.StatusOK, map[string][]float64{"embedding": {}})
		return
	}
	// The older route truncates, and does not normalise in Ollama; lem's
	// embeddings are what the model's configuration says in both.
	res, err := m.Embed(r.Context(), EmbedRequest{Texts: []string{o.Prompt}, Truncate: true, InputParam: "prompt"})
	if err != nil {
		s.embedError(w, r, err, ollamaErrors)
		return
	}
	v := make([]float64, len(res.Embeddings[0]))
	for i, x := range res.Embeddings[0] {
		v[i] = float64(x)
	}
	writeJSON(w, http.StatusOK, map[string][]float64{"embedding": v})
}

// rawKeepAlive returns the JSON of a keep_alive decoded as any (nil when
// absent).
func rawKeepAlive(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	data, _ := json.Marshal(v)
	return data
}

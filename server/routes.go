package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/lem-engine/lem/server/webui"
)

// A route is one entry of the route table: the mux serves it and the
// OpenAPI document (openapi.go) describes it, both from this entry.
type route struct {
	pattern string      // "METHOD /path" as http.ServeMux takes it
	errors  errorWriter // writes the route's errors in its dialect
	flags   int         // open, shared
	handler http.HandlerFunc

	dialect string // the OpenAPI tag: "lem", "OpenAI", "Anthropic", "Ollama"
	summary string
	// request is a value of the type the handler decodes the body into
	// (nil: no body); response one of the type of its JSON reply (nil:
	// any JSON value); errorBody one of the type errors writes.
	request, response, errorBody any
	// stream is the media type of the reply when the request asks to
	// stream (mediaSSE, mediaNDJSON; "": none); media that of a reply
	// that is not JSON.
	stream, media string
	// event is a value of the type of each server-sent event's JSON data,
	// or a list of values, one of each kind of event (nil: not
	// documented).
	event any
}

// The error bodies of the dialects (the values errors write).
var (
	openaiErrorValue = oaError{}
	ollamaErrorValue = map[string]string{}
)

// routeTable lists every route the server serves (besides the catch-all
// 404 and the CORS preflight). Adding a route is adding it here.
func (s *Server) routeTable() []route {
	return append([]route{
		{pattern: "GET /health", errors: openaiErrors, flags: open, handler: s.health,
			dialect: "lem", summary: "Liveness: the server answers and how many models it serves", response: healthReply{}, errorBody: openaiErrorValue},
		{pattern: "GET /metrics", errors: openaiErrors, handler: s.metricsHandler,
			dialect: "lem", summary: "Prometheus metrics", media: "text/plain", errorBody: openaiErrorValue},
		{pattern: "GET /openapi.json", errors: openaiErrors, flags: open, handler: s.serveOpenAPI,
			dialect: "lem", summary: "This OpenAPI 3.1 document", errorBody: openaiErrorValue},

		{pattern: "POST /v1/chat/completions", errors: openaiErrors, handler: s.chatCompletions,
			dialect: "OpenAI", summary: "Chat completion", request: oaChatRequest{}, response: oaChatCompletion{}, stream: mediaSSE, event: oaChatChunk{}, errorBody: openaiErrorValue},
		{pattern: "POST /v1/completions", errors: openaiErrors, handler: s.completions,
			dialect: "OpenAI", summary: "Text completion (also fill-in-the-middle and prompt scoring)", request: oaCompletionRequest{}, response: oaCompletion{}, stream: mediaSSE, event: oaCompletionChunk{}, errorBody: openaiErrorValue},
		{pattern: "GET /v1/models", errors: openaiErrors, flags: shared, handler: s.listModels,
			dialect: "OpenAI", summary: "List the models (also Anthropic's shape)", response: oaModelList{}, errorBody: openaiErrorValue},
		{pattern: "GET /v1/models/{id...}", errors: openaiErrors, flags: shared, handler: s.getModel,
			dialect: "OpenAI", summary: "One model (also Anthropic's shape)", response: oaModelCard{}, errorBody: openaiErrorValue},
		{pattern: "POST /v1/responses", errors: openaiErrors, handler: s.responses,
			dialect: "OpenAI", summary: "Create a response (Responses API)", request: respRequest{}, response: respBody{}, stream: mediaSSE, event: respStreamEvents, errorBody: openaiErrorValue},
		{pattern: "GET /v1/responses/{id}", errors: openaiErrors, handler: s.getResponse,
			dialect: "OpenAI", summary: "A stored response", response: respBody{}, errorBody: openaiErrorValue},
		{pattern: "DELETE /v1/responses/{id}", errors: openaiErrors, handler: s.deleteResponse,
			dialect: "OpenAI", summary: "Delete a stored response", response: respDeleted{}, errorBody: openaiErrorValue},

		{pattern: "POST /v1/embeddings", errors: openaiErrors, handler: s.embeddings,
			dialect: "OpenAI", summary: "Embeddings of one or more inputs", request: oaEmbeddingRequest{}, response: oaEmbeddingResponse{}, errorBody: openaiErrorValue},
		{pattern: "POST /v1/rerank", errors: openaiErrors, handler: s.rerank,
			dialect: "OpenAI", summary: "Rank documents against a query (Cohere and Jina shape)", request: rerankRequest{}, response: rerankResponse{}, errorBody: openaiErrorValue},
		{pattern: "POST /v1/score", errors: openaiErrors, handler: s.score,
			dialect: "OpenAI", summary: "Score text pairs (vLLM shape)", request: scoreRequest{}, response: scoreResponse{}, errorBody: openaiErrorValue},

		{pattern: "POST /v1/messages", errors: anthropicErrors, handler: s.anthropicMessages,
			dialect: "Anthropic", summary: "Create a message", request: anRequest{}, response: anResponse{}, stream: mediaSSE, event: anStreamEvents, errorBody: anError{}},
		{pattern: "POST /v1/messages/count_tokens", errors: anthropicErrors, handler: s.anthropicCountTokens,
			dialect: "Anthropic", summary: "Count a message's input tokens", request: anRequest{}, response: map[string]int{}, errorBody: anError{}},

		{pattern: "POST /api/chat", errors: ollamaErrors, handler: s.ollamaChat,
			dialect: "Ollama", summary: "Chat", request: olChatRequest{}, response: olChatResponse{}, stream: mediaNDJSON, errorBody: ollamaErrorValue},
		{pattern: "POST /api/generate", errors: ollamaErrors, handler: s.ollamaGenerate,
			dialect: "Ollama", summary: "Generate from a prompt (also fill-in-the-middle)", request: olGenerateRequest{}, response: olGenerateResponse{}, stream: mediaNDJSON, errorBody: ollamaErrorValue},
		{pattern: "POST /api/embed", errors: ollamaErrors, handler: s.ollamaEmbed,
			dialect: "Ollama", summary: "Embeddings of one or more inputs", request: ollamaEmbedRequest{}, response: ollamaEmbedResponse{}, errorBody: ollamaErrorValue},
		{pattern: "POST /api/embeddings", errors: ollamaErrors, handler: s.ollamaEmbeddings,
			dialect: "Ollama", summary: "The embedding of one prompt (the older route)", request: ollamaEmbeddingsRequest{}, response: map[string][]float64{}, errorBody: ollamaErrorValue},
		{pattern: "GET /api/tags", errors: ollamaErrors, handler: s.ollamaTags,
			dialect: "Ollama", summary: "List the models", response: olModelList{}, errorBody: ollamaErrorValue},
		{pattern: "POST /api/show", errors: ollamaErrors, handler: s.ollamaShow,
			dialect: "Ollama", summary: "A model's details, template and parameters", request: olShowRequest{}, response: olShowResponse{}, errorBody: ollamaErrorValue},
		{pattern: "GET /api/ps", errors: ollamaErrors, handler: s.ollamaPS,
			dialect: "Ollama", summary: "The loaded models", response: olModelList{}, errorBody: ollamaErrorValue},
		{pattern: "GET /api/version", errors: ollamaErrors, handler: s.ollamaVersionHandler,
			dialect: "Ollama", summary: "The Ollama API version lem speaks", response: map[string]string{}, errorBody: ollamaErrorValue},
		{pattern: "GET /{$}", errors: ollamaErrors, flags: open, handler: s.ollamaRoot,
			dialect: "Ollama", summary: `The chat page for a browser (Accept: text/html); else "lem is running", as Ollama answers`, media: "text/plain", errorBody: ollamaErrorValue},
		{pattern: "GET " + webui.Prefix, errors: ollamaErrors, flags: open, handler: webui.ServeAsset,
			dialect: "lem", summary: "The chat page's script and style sheet", media: "text/plain", errorBody: ollamaErrorValue},
	}, append(s.manageRoutes(), s.adminRoutes()...)...)
}

// routes registers every route of the table, then the CORS preflight and
// the catch-all 404.
func (s *Server) routes() {
	for _, rt := range s.routeTable() {
		s.handle(rt.pattern, rt.errors, rt.flags, rt.handler)
	}
	s.mux.HandleFunc("OPTIONS /", s.preflight)
	s.handle("/", openaiErrors, open, func(w http.ResponseWriter, r *http.Request) {
		// Under /api/ the Ollama dialect's shape, {"error": "…"}, which
		// its clients show; elsewhere OpenAI's.
		errors := openaiErrors
		if strings.HasPrefix(r.URL.Path, "/api/") {
			errors = ollamaErrors
		}
		if methods := s.methods[r.URL.Path]; len(methods) > 0 {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			errors(w, &Error{Status: http.StatusMethodNotAllowed, Code: CodeInvalidRequest,
				Message: fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, strings.Join(methods, " or "))})
			return
		}
		errors(w, &Error{Status: http.StatusNotFound, Code: CodeNotFound,
			Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
}

// healthReply is the reply of GET /health.
type healthReply struct {
	Status string `json:"status"`
	Models int    `json:"models"`
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	n := len(s.models)
	if s.reg != nil {
		n = len(s.reg.order)
	}
	writeJSON(w, http.StatusOK, healthReply{Status: "ok", Models: n})
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) {
	s.metrics.handler().ServeHTTP(w, r)
}

package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/constrain"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/tokenizer"
)

// Limits on what one request may ask for.
const (
	MaxChoices     = 16  // n
	MaxStops       = 16  // stop sequences
	MaxStopLen     = 256 // bytes per stop sequence
	MaxTopLogprobs = 20
)

// Finish reasons, as Choice.Finish and Event.Finish report them.
const (
	FinishStop      = "stop"       // a stop token or stop sequence
	FinishLength    = "length"     // the token limit or the context's end
	FinishToolCalls = "tool_calls" // the reply made tool calls
)

// ToolMode says whether and how the model must call tools.
type ToolMode uint8

const (
	ToolAuto     ToolMode = iota // the model chooses
	ToolNone                     // no tools: they are left out of the prompt
	ToolRequired                 // the model should call a tool
	ToolNamed                    // the model should call the tool Name
)

// ToolChoice is a request's tool_choice.
type ToolChoice struct {
	Mode ToolMode
	Name string // for ToolNamed
}

// Request is a dialect-neutral generation request. A dialect adapter
// decodes its own JSON into one, calls Model.Prepare, then Model.Generate.
//
// A chat request sets Messages (rendered with the model's chat template);
// a completion request sets Prompt or PromptIDs instead.
type Request struct {
	Messages   []chat.Message
	Tools      []json.RawMessage // {"type":"function","function":{...}} objects
	ToolChoice ToolChoice
	// Kwargs are extra chat-template variables (enable_thinking, …).
	Kwargs map[string]any
	// Template names a template of the model's set; empty picks the
	// default (or "tool_use" when tools are offered).
	Template string

	// Prompt is the raw text of a completion request; PromptIDs, when not
	// nil, are its tokens instead.
	Prompt    string
	PromptIDs []int32

	// MaxTokens bounds the generated tokens per choice. Unset (0 and
	// MaxTokensSet false), generation may run to the end of the context.
	// It must be between 1 and the context length (ZeroTokens allows 0:
	// nothing is generated), and with the prompt it must fit the context
	// unless MaxTokensBound.
	MaxTokens int
	// MaxTokensSet says the client gave MaxTokens (a non-zero MaxTokens
	// counts as given): it tells an explicit 0 from none.
	MaxTokensSet bool
	// MaxTokensBound makes MaxTokens a bound, cut to what the context
	// leaves after the prompt, rather than a demand refused when it does
	// not fit: for dialects whose clients always send a limit
	// (Anthropic's required max_tokens, Ollama's num_predict).
	MaxTokensBound bool
	// ZeroTokens allows MaxTokens 0, where the API defines it (OpenAI's
	// legacy completions: the prompt is echoed and scored, nothing is
	// generated).
	ZeroTokens bool
	// Sample holds the sampling parameters; start from
	// Model.SampleDefaults.
	Sample engine.SampleParams
	// Stop sequences end generation; they are never emitted.
	Stop []string
	// N is the number of choices (0 means 1).
	N int
	// Logprobs asks for each token's log-probability and TopLogprobs
	// alternatives.
	Logprobs    bool
	TopLogprobs int
	// PromptLogprobs asks for the log-probability of each prompt token
	// after the first, with TopLogprobs alternatives (Result.PromptLogprobs
	// and EventStart's Logprobs): OpenAI's legacy completions with echo.
	PromptLogprobs bool
	// JSON constrains the output to one JSON object.
	JSON bool
	// Schema, when set, constrains the output to a JSON value the schema
	// accepts (see constrain.CompileSchema).
	Schema *constrain.Schema
	// ThinkingBudget, when positive, bounds the reasoning: after that many
	// tokens of it the model's end-of-reasoning marker is forced.
	ThinkingBudget int
	// IgnoreEOS keeps generating past the model's stop tokens, until the
	// token limit, a stop sequence or the end of the context (ignore_eos,
	// as llama-server and vLLM take it: for load tests of fixed lengths).
	IgnoreEOS bool

	// Names of request fields, as this dialect spells them, for error
	// messages: MaxTokensParam defaults to "max_tokens", PromptParam to
	// "messages" (chat) or "prompt".
	MaxTokensParam string
	PromptParam    string
	// Params maps the core's names of the other fields ("temperature",
	// "stop", "top_logprobs", …; see checkRequest) to the dialect's
	// ("options.temperature", "stop_sequences", …) where they differ.
	Params map[string]string

	// mediation marks the welfare guard's own generation, which is not
	// scored; welfare holds the guard's outcome once decided, so that a
	// request prepared again (or a copy of it) is not mediated twice.
	mediation bool
	welfare   *welfareOutcome
}

// Prepared is a validated request with its prompt rendered and tokenized.
type Prepared struct {
	req          *Request
	ids          []int32
	text         string
	maxTokens    int
	n            int
	inReasoning  bool
	toolsOffered bool
	// reasonFirst says that the grammar lets the model reason before the
	// JSON value it holds the reply to: the reply's parser splits the
	// reasoning off.
	reasonFirst bool
	json        func(stopIDs []int32) engine.Constraint
	grammar     *constrain.Grammar
	arrived     time.Time
	// pause is the welfare guard's reply when it paused the
	// conversation: Generate answers with it instead of the model.
	pause string
}

// PromptTokens returns the number of prompt tokens.
func (p *Prepared) PromptTokens() int { return len(p.ids) }

// PromptText returns the rendered prompt (the chat template's output, or
// the completion prompt).
func (p *Prepared) PromptText() string { return p.text }

// MaxTokens returns the token limit per choice after defaults.
func (p *Prepared) MaxTokens() int { return p.maxTokens }

// EventKind tells what an Event carries.
type EventKind uint8

const (
	// EventStart comes once, when the request has been admitted and
	// generation begins; streaming adapters send their headers then.
	// Its Logprobs are the prompt's when Request.PromptLogprobs asked
	// for them (Result.PromptLogprobs).
	EventStart EventKind = iota
	// EventContent carries reply text.
	EventContent
	// EventReasoning carries text between the model's thinking markers.
	EventReasoning
	// EventToolCall carries one complete tool call.
	EventToolCall
	// EventEnd ends a choice; Finish holds the reason.
	EventEnd
	// EventQueued comes once, before EventStart, when the request has
	// to wait for its model behind others (rather than being refused):
	// streaming adapters send their headers then, so that the client
	// knows at once that it was accepted.
	EventQueued
	// EventKeepAlive comes every Config.KeepAlive while the request
	// waits; streaming adapters write a frame their clients ignore
	// (stream.wait), so that read timeouts do not fire.
	EventKeepAlive
)

// Event is one step of a streamed generation.
type Event struct {
	Kind   EventKind
	Choice int // index of the choice (0 unless N > 1)
	Text   string
	Call   *ToolCall
	// Logprobs of the tokens that produced this event (and of tokens
	// before it that produced no event). Only when Request.Logprobs.
	Logprobs []TokenLogprob
	// Finish and StopSequence are set on EventEnd.
	Finish       string
	StopSequence string
}

// ToolCall is a tool call parsed from the model's output.
type ToolCall struct {
	Index     int    // position among the choice's calls
	ID        string // "call_…", unique
	Name      string
	Arguments json.RawMessage // a JSON object
}

// TokenLogprob is a generated token with its log-probability and the most
// likely alternatives at its position.
type TokenLogprob struct {
	ID      int32
	Token   string
	Logprob float32
	Top     []TopLogprob
}

// TopLogprob is an alternative token.
type TopLogprob struct {
	ID      int32
	Token   string
	Logprob float32
}

// Choice is one finished choice.
type Choice struct {
	Content   string
	Reasoning string
	ToolCalls []ToolCall
	Logprobs  []TokenLogprob
	Finish    string
	// StopSequence is the stop sequence that ended the choice, if one did.
	StopSequence string
	// Tokens is the number of tokens generated.
	Tokens int
	// ReasoningTokens is the number of those that were reasoning: from
	// the token that opened it to the one that closed it (see
	// choiceRun.onToken).
	ReasoningTokens int
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// ReasoningTokens are the completion tokens that were reasoning.
	ReasoningTokens int
	// CachedTokens are prompt tokens reused from the model's prefix cache
	// rather than computed (those of the first choice).
	CachedTokens int
}

// TotalTokens returns prompt plus completion tokens.
func (u Usage) TotalTokens() int { return u.PromptTokens + u.CompletionTokens }

// Result is a finished request.
type Result struct {
	Choices []Choice
	Usage   Usage
	// PromptLogprobs are the prompt tokens' log-probabilities when
	// Request.PromptLogprobs asked for them: the first token has none
	// (Logprob 0, no Top) as nothing comes before it.
	PromptLogprobs []TokenLogprob
}

// ModelOptions configure a served model.
type ModelOptions struct {
	// Context is the context length of each sequence in tokens (0: the
	// model's engine.Model.DefaultLength).
	Context int
	// Parallel is how many sequences run at once (0: chosen by the
	// scheduler from the memory of its cache). The model's queue admits
	// as many requests at once; the choices of a request with n > 1 are
	// sequences of their own.
	Parallel int
	// KVBytes is the memory of the model's paged KV cache (0: a default
	// from the free memory).
	KVBytes int64
	// Draft is the most draft tokens a sequence runs per step
	// (engine.SchedulerOptions.Draft: 0 the backend's default, negative
	// none).
	Draft int
	// Created is reported as the model's creation time (zero: now).
	Created time.Time
	// Defaults are the deployer's defaults of the model's requests
	// (--config, a manifest of /api/create): a request's own values win.
	Defaults ModelDefaults
}

// Model is a model as the server serves it: the engine model, the
// scheduler that runs its sequences together over one paged cache (whose
// full blocks are kept for any later request with the same prefix), and
// the queue that admits its requests up to the scheduler's parallelism.
type Model struct {
	id      string
	created time.Time
	eng     *engine.Model
	ctxLen  int
	format  outputFormat
	quoter  *tokenizer.Quoter // quotes a request's text for the template (quote.go)

	q     *queue
	sched *engine.Scheduler
	// promptHook, when set (by tests), is called with the prompt of each
	// generation as it goes to the scheduler.
	promptHook func([]int32)

	srv *Server // set by New

	jsonOnce sync.Once
	jsonMake func(stopIDs []int32) engine.Constraint
	jsonErr  error

	vocabOnce sync.Once
	vocabTab  *constrain.Vocab
	vocabErr  error

	storeOnce sync.Once
	storeInfo modelStore

	// defaults are the deployer's defaults of requests (ModelOptions).
	defaults ModelDefaults

	// Per-model metric children, set by New.
	obs modelMetrics

	// enc runs an encoder model (NewEncoderModel): it embeds, and scores
	// pairs when it has a classification head; it does not generate, and
	// sched is nil.
	enc    *engine.EncoderRunner
	encNet model.Encoder
}

// NewModel wraps an engine model for serving under id, starting its
// scheduler. The model must have a tokenizer. A Server closes the
// models it serves when it shuts down; a model never given to New must
// be closed by its owner.
func NewModel(id string, m *engine.Model, opts ModelOptions) (*Model, error) {
	if m.Tokenizer == nil {
		return nil, fmt.Errorf("serve %s: the model has no tokenizer", m.Name)
	}
	if id == "" {
		return nil, errors.New("serve: empty model id")
	}
	ctxLen := opts.Context
	if ctxLen <= 0 {
		ctxLen = m.DefaultLength()
	}
	switch {
	case opts.Parallel < 0:
		return nil, fmt.Errorf("serve %s: parallel sequences must not be negative (got %d)", id, opts.Parallel)
	case opts.KVBytes < 0:
		return nil, fmt.Errorf("serve %s: KV cache memory must not be negative (got %d)", id, opts.KVBytes)
	}
	created := opts.Created
	if created.IsZero() {
		created = time.Now()
	}
	sched, err := m.NewScheduler(engine.SchedulerOptions{Parallel: opts.Parallel, Context: ctxLen, KVBytes: opts.KVBytes, Draft: opts.Draft})
	if err != nil {
		return nil, fmt.Errorf("serve %s: %w", id, err)
	}
	if err := opts.Defaults.check(); err != nil {
		sched.Close()
		return nil, fmt.Errorf("serve %s: %w", id, err)
	}
	if opts.Defaults.Template != "" {
		set, err := chat.NewSet(map[string]string{chat.DefaultName: opts.Defaults.Template}, chat.Options{SpecialTokens: specialTokens(m)})
		if err != nil {
			sched.Close()
			return nil, fmt.Errorf("serve %s: the template: %w", id, err)
		}
		m.Templates = set
	}
	sm := &Model{id: id, created: created, eng: m, ctxLen: ctxLen, sched: sched, defaults: opts.Defaults}
	if m.Templates != nil {
		if t := m.Templates.Default(); t != nil {
			sm.format = detectOutputFormat(t)
		}
	}
	sm.quoter = newQuoter(m.Tokenizer, m.Templates, sm.format)
	return sm, nil
}

// Close stops the model's scheduler: generations still running end with
// an error, and its cache is freed. The server closes its models when it
// shuts down.
func (m *Model) Close() error {
	if m.sched == nil {
		return nil
	}
	return m.sched.Close()
}

// Parallel returns how many sequences of the model run at once (an
// encoder model's requests run one at a time, each batched).
func (m *Model) Parallel() int {
	if m.sched == nil {
		return 1
	}
	return m.sched.Stats().Parallel
}

// config returns the model's configuration.
func (m *Model) config() *model.Config {
	if m.encNet != nil {
		return m.encNet.Config()
	}
	return m.eng.Net.Config()
}

// errEmbeddingOnly is the error of a generation request to an encoder
// model.
func (m *Model) errEmbeddingOnly() *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest,
		Message: fmt.Sprintf("model %q is an embedding model: it serves embeddings (/v1/embeddings, /api/embed) and, with a classification head, reranking (/v1/rerank, /v1/score), not text generation", m.id)}
}

// NewEncoderModel wraps an encoder model (BERT, XLM-RoBERTa, ModernBERT)
// for serving under id: it answers the embedding routes, pooled and
// normalised as e.Embedding says, and, when it has a classification head
// of one or two labels (a cross-encoder), /v1/rerank and /v1/score. The
// generation routes answer it with a 400. The model must have a
// tokenizer; opts.Context caps the tokens of an input (0: the model's
// position table). A Server closes the model's runner, not e itself.
func NewEncoderModel(id string, e *engine.Encoder, opts ModelOptions) (*Model, error) {
	if e.Tokenizer == nil {
		return nil, fmt.Errorf("serve %s: the model has no tokenizer", e.Name)
	}
	if id == "" {
		return nil, errors.New("serve: empty model id")
	}
	ctxLen := e.Net.MaxTokens()
	if opts.Context > 0 {
		ctxLen = min(opts.Context, ctxLen)
	}
	created := opts.Created
	if created.IsZero() {
		created = time.Now()
	}
	shell := &engine.Model{Name: e.Name, Backend: e.Backend, Tokenizer: e.Tokenizer, Embedding: e.Embedding}
	return &Model{id: id, created: created, eng: shell, ctxLen: ctxLen,
		enc: engine.NewEncoderRunner(e.Net, 0), encNet: e.Net}, nil
}

// ID returns the id clients use for the model.
func (m *Model) ID() string { return m.id }

// Created returns the model's reported creation time.
func (m *Model) Created() time.Time { return m.created }

// ContextLength returns the context length requests are checked against.
func (m *Model) ContextLength() int { return m.ctxLen }

// Engine returns the engine model.
func (m *Model) Engine() *engine.Model { return m.eng }

// SampleDefaults returns the sampling parameters a request starts from:
// the model's generation_config.json where it sets them, else temperature
// 1 and no truncation.
func (m *Model) SampleDefaults() engine.SampleParams {
	p := m.genDefaults()
	m.defaults.apply(&p)
	return p
}

// genDefaults returns the sampling parameters of the model's files.
func (m *Model) genDefaults() engine.SampleParams {
	p := engine.SampleParams{Temperature: 1}
	g := m.eng.GenConfig
	if g == nil {
		return p
	}
	if g.Temperature != nil {
		p.Temperature = float32(*g.Temperature)
	}
	if g.DoSample != nil && !*g.DoSample {
		p.Temperature = 0
	}
	if g.TopK != nil {
		p.TopK = *g.TopK
	}
	if g.TopP != nil {
		p.TopP = float32(*g.TopP)
	}
	if g.MinP != nil {
		p.MinP = float32(*g.MinP)
	}
	if g.RepetitionPenalty != nil {
		p.RepetitionPenalty = float32(*g.RepetitionPenalty)
	}
	return p
}

// applyDefaults gives req the deployer's defaults it does not set
// itself: a system prompt to a chat without one, and stop sequences to a
// request without any (the sampling defaults are in SampleDefaults, the
// token limit in checkContext).
func (m *Model) applyDefaults(req *Request) {
	d := &m.defaults
	if d.System != "" && len(req.Messages) > 0 && req.Messages[0].Role != "system" && req.Messages[0].Role != "developer" {
		req.Messages = append([]chat.Message{{Role: "system", Content: chat.Text(d.System)}}, req.Messages...)
	}
	if len(req.Stop) == 0 && len(d.Stop) > 0 {
		req.Stop = slices.Clone(d.Stop)
	}
}

// specialTokens returns the special tokens a chat template reads.
func specialTokens(m *engine.Model) map[string]string {
	out := map[string]string{}
	tok := m.Tokenizer
	if tok == nil {
		return out
	}
	if t := tok.Token(tok.BOS()); t != "" {
		out["bos_token"] = t
	}
	if len(m.StopIDs) > 0 {
		if t := tok.Token(m.StopIDs[0]); t != "" {
			out["eos_token"] = t
		}
	}
	return out
}

// Prepare validates req, renders its prompt and checks it against the
// context. Every error is an *Error (400 for the client's mistakes).
func (m *Model) Prepare(req *Request) (*Prepared, error) {
	return m.PrepareContext(context.Background(), req)
}

// PrepareContext is Prepare for a request whose client may leave: the
// rendering and tokenizing of prompts is bounded server-wide
// (Config.MaxPrepareBytes), and ctx ending while the request waits for
// its turn ends the wait.
func (m *Model) PrepareContext(ctx context.Context, req *Request) (*Prepared, error) {
	if m.enc != nil {
		return nil, m.errEmbeddingOnly()
	}
	m.applyDefaults(req)
	arrived := time.Now()
	if err := m.checkRequest(req); err != nil {
		return nil, err
	}
	// The welfare guard (welfare.go), when on, may rephrase the user's
	// last message for this request or answer it with a pause.
	req, pause := m.welfare(ctx, req)
	p := &Prepared{req: req, arrived: arrived, n: max(req.N, 1), pause: pause}
	vocab := m.config().VocabSize
	promptParam := param(req.PromptParam, "prompt")
	if len(req.Messages) > 0 {
		promptParam = param(req.PromptParam, "messages")
	}
	release, err := m.admit(ctx, req, promptParam)
	if err != nil {
		return nil, err
	}
	defer release()
	tok := m.eng.Tokenizer
	var tools []json.RawMessage
	if len(req.Messages) > 0 {
		text, offered, err := m.render(req, promptParam)
		if err != nil {
			return nil, err
		}
		p.text = tokenizer.Unquote(text)
		// The client's text (quoted by render) is encoded as plain text.
		if p.ids, err = m.encodeBounded(tok.EncodeQuotedLimit, text, false, promptParam); err != nil {
			return nil, err
		}
		if tok.AddsBOS() && (len(p.ids) == 0 || p.ids[0] != tok.BOS()) && !strings.HasPrefix(p.text, tok.Token(tok.BOS())) {
			p.ids = append([]int32{tok.BOS()}, p.ids...)
		}
		tools = offered
		p.toolsOffered = len(req.Tools) > 0 && req.ToolChoice.Mode != ToolNone
		p.inReasoning = m.format.InReasoning(text)
	} else {
		if req.PromptIDs != nil {
			for i, id := range req.PromptIDs {
				if id < 0 || int(id) >= vocab {
					return nil, invalid(fmt.Sprintf("%s[%d]", promptParam, i), "token id %d is outside the vocabulary [0, %d)", id, vocab)
				}
			}
			p.ids = req.PromptIDs
			p.text = tok.Decode(req.PromptIDs, false)
		} else {
			p.text = req.Prompt
			if p.ids, err = m.encodeBounded(tok.EncodeLimit, req.Prompt, true, promptParam); err != nil {
				return nil, err
			}
		}
		if len(p.ids) == 0 {
			return nil, invalid(promptParam, "the prompt is empty")
		}
	}
	if err := m.checkContext(p); err != nil {
		return nil, err
	}
	g, err := m.grammar(req, p, tools)
	if err != nil {
		return nil, invalid(param(req.PromptParam, "messages"), "constraining the output: %v", err)
	}
	p.grammar = g
	if req.JSON && g == nil {
		// One JSON object from the first token.
		m.jsonOnce.Do(func() { m.jsonMake, m.jsonErr = newJSONFactory(tok) })
		if m.jsonErr != nil {
			return nil, invalid("response_format", "%v", m.jsonErr)
		}
		p.json = m.jsonMake
	}
	return p, nil
}

// checkContext rejects a prompt that, with its token limit, does not fit
// the context, and fills in the default limit.
func (m *Model) checkContext(p *Prepared) error {
	n := len(p.ids)
	promptParam := param(p.req.PromptParam, "messages")
	if len(p.req.Messages) == 0 {
		promptParam = param(p.req.PromptParam, "prompt")
	}
	if n >= m.ctxLen {
		return &Error{Status: 400, Code: CodeContextExceeded, Param: promptParam,
			Message: fmt.Sprintf("the prompt has %d tokens; the model's context holds %d, leaving no room for output", n, m.ctxLen)}
	}
	p.maxTokens = p.req.MaxTokens
	if !p.req.MaxTokensSet && p.maxTokens == 0 {
		p.maxTokens = m.ctxLen - n
		if d := m.defaults.MaxTokens; d != nil {
			p.maxTokens = min(*d, p.maxTokens)
		}
		return nil
	}
	if p.req.MaxTokensBound {
		p.maxTokens = min(p.maxTokens, m.ctxLen-n)
		return nil
	}
	if n+p.maxTokens > m.ctxLen {
		return &Error{Status: 400, Code: CodeContextExceeded, Param: param(p.req.MaxTokensParam, "max_tokens"),
			Message: fmt.Sprintf("the prompt (%d tokens) plus %s (%d) is %d tokens, more than the model's context of %d; lower %[2]s to at most %[6]d",
				n, param(p.req.MaxTokensParam, "max_tokens"), p.maxTokens, n+p.maxTokens, m.ctxLen, m.ctxLen-n)}
	}
	return nil
}

func param(name, def string) string {
	if name != "" {
		return name
	}
	return def
}

// render renders a chat request with the model's template. It returns
// the tools the prompt offers.
func (m *Model) render(req *Request, promptParam string) (string, []json.RawMessage, error) {
	if m.eng.Templates == nil {
		return "", nil, invalid(promptParam, "the model %q has no chat template; use the completions endpoint", m.id)
	}
	msgs, err := normalizeMessages(req.Messages, promptParam)
	if err != nil {
		return "", nil, err
	}
	if ch := m.format.Channels(); ch != nil && ch.ReasoningKey != "" {
		reasoningField(msgs, ch.ReasoningKey)
	}
	splitReasoning(msgs, m.format)
	tools := req.Tools
	switch req.ToolChoice.Mode {
	case ToolNone:
		tools = nil
	case ToolNamed:
		tools = nil
		for _, t := range req.Tools {
			if toolName(t) == req.ToolChoice.Name {
				tools = append(tools, t)
			}
		}
		if tools == nil {
			return "", nil, invalid("tool_choice", "names the function %q, which is not among the tools", req.ToolChoice.Name)
		}
	case ToolRequired:
		if len(tools) == 0 {
			return "", nil, invalid("tool_choice", "is \"required\" but no tools were given")
		}
	}
	for i, t := range tools {
		if toolName(t) == "" {
			return "", nil, invalid(fmt.Sprintf("tools[%d]", i), "want {\"type\": \"function\", \"function\": {\"name\": …}}")
		}
	}
	t, err := m.eng.Templates.Select(req.Template, len(tools) > 0)
	if err != nil {
		return "", nil, invalid("template", "%v", err)
	}
	if len(tools) == 0 {
		tools = nil
	}
	// The template sees the request's text quoted; the tools go back as
	// sent, for the grammar.
	in := chat.Input{AddGenerationPrompt: true}
	in.Messages, in.Tools, in.Kwargs = quoteInput(m.quoter, msgs, tools, req.Kwargs)
	text, err := t.Render(in)
	if err != nil {
		var re *chat.RaiseError
		if errors.As(err, &re) {
			return "", nil, invalid(promptParam, "the model's chat template rejected the conversation: %s", re.Message)
		}
		return "", nil, invalid(promptParam, "rendering the chat template: %v", err)
	}
	return text, tools, nil
}

// toolName returns function.name of a tool definition, or "".
func toolName(raw json.RawMessage) string {
	var t struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &t) != nil || t.Function == nil || (t.Type != "" && t.Type != "function") {
		return ""
	}
	return t.Function.Name
}

// normalizeMessages prepares client messages for a template: list content
// made of text parts becomes a string (most templates concatenate content
// as a string), absent content becomes "", the "developer" role becomes
// "system", and tool-call arguments sent as a JSON string become the
// object it holds.
func normalizeMessages(in []chat.Message, promptParam string) ([]chat.Message, error) {
	out := make([]chat.Message, len(in))
	for i, msg := range in {
		where := fmt.Sprintf("%s[%d]", promptParam, i)
		if msg.Role == "" {
			return nil, invalid(where+".role", "is required")
		}
		if msg.Role == "developer" {
			msg.Role = "system"
		}
		switch c := msg.Content; {
		case c.IsNone():
			msg.Content = chat.Text("")
		case c.IsParts():
			var b strings.Builder
			for j, part := range c.Parts() {
				switch part.Type {
				case "text", "input_text", "output_text":
					b.WriteString(part.Text)
				default:
					return nil, invalid(fmt.Sprintf("%s.content[%d]", where, j), "content of type %q is not supported: this server takes text only", part.Type)
				}
			}
			msg.Content = chat.Text(b.String())
		}
		if len(msg.ToolCalls) > 0 {
			calls := make([]chat.ToolCall, len(msg.ToolCalls))
			for j, tc := range msg.ToolCalls {
				if tc.Name == "" {
					return nil, invalid(fmt.Sprintf("%s.tool_calls[%d].function.name", where, j), "is required")
				}
				args := bytes.TrimSpace(tc.Arguments)
				if len(args) > 0 && args[0] == '"' {
					var s string
					if json.Unmarshal(args, &s) == nil {
						if st := strings.TrimSpace(s); st == "" {
							args = []byte("{}")
						} else if json.Valid([]byte(st)) {
							args = []byte(st)
						}
					}
				}
				tc.Arguments = args
				calls[j] = tc
			}
			msg.ToolCalls = calls
		}
		out[i] = msg
	}
	return out, nil
}

// reasoningField gives each assistant message with reasoning a field of
// the given key holding it, where the templates of formats with channels
// read an earlier turn's reasoning (chat.Channels.ReasoningKey).
func reasoningField(msgs []chat.Message, key string) {
	for i, msg := range msgs {
		if msg.Role != "assistant" || msg.ReasoningContent == "" {
			continue
		}
		has := false
		for _, f := range msg.Extra {
			has = has || f.Key == key
		}
		if !has {
			v, _ := json.Marshal(msg.ReasoningContent)
			msgs[i].Extra = append(slices.Clip(msg.Extra), chat.Field{Key: key, Value: v})
		}
	}
}

// eventParser splits model output into content, reasoning and tool calls.
type eventParser interface {
	Feed(delta string) []outputEvent
	Finish() []outputEvent
	// Reasoning reports whether the output so far ends inside reasoning.
	Reasoning() bool
}

// plainText is the parser of raw completions and JSON output: all of it
// is content.
type plainText struct{}

func (plainText) Feed(delta string) []outputEvent {
	if delta == "" {
		return nil
	}
	return []outputEvent{{Kind: outputContent, Text: delta}}
}

func (plainText) Finish() []outputEvent { return nil }

func (plainText) Reasoning() bool { return false }

// errStopSequence ends generation when a stop sequence is found.
var errStopSequence = errors.New("stop sequence")

// errPolicyRefused ends generation when a policy rule refuses the reply.
var errPolicyRefused = errors.New("refused by policy")

// Generate waits for the model in its queue (failing at once with a 429
// *Error when the queue is full, or 503 when the server is shutting down),
// then generates every choice of p, calling emit, when not nil, with each
// event: EventQueued and EventKeepAlive while it waits (only when it has
// to), EventStart once admitted, then the events of the choices, which
// run at once in the model's batch (their events interleave; each
// choice's come in order and end with its EventEnd). emit is never called
// from two goroutines at once. An error from emit, or ctx ending, stops
// generation within one token (the prefill within one step of the
// scheduler) and is returned. On success it returns the result; after a
// failure in the middle of a choice it returns what was generated with
// the error.
func (m *Model) Generate(ctx context.Context, p *Prepared, emit func(Event) error) (*Result, error) {
	if p.pause != "" {
		return m.pauseReply(ctx, p, emit)
	}
	if err := m.wait(ctx, emit); err != nil {
		return nil, err
	}
	defer m.q.release()
	if emit == nil {
		emit = func(Event) error { return nil }
	}
	res := &Result{Choices: make([]Choice, p.n), Usage: Usage{PromptTokens: len(p.ids)}}
	if p.req.PromptLogprobs {
		lps, err := m.scorePrompt(ctx, p)
		if err != nil {
			return nil, err
		}
		res.PromptLogprobs = lps
	}
	if err := emit(Event{Kind: EventStart, Logprobs: res.PromptLogprobs}); err != nil {
		return nil, err
	}
	m.obs.promptTokens.Add(float64(len(p.ids)))
	if m.promptHook != nil {
		m.promptHook(p.ids)
	}
	cached, err := m.runChoices(ctx, p, res.Choices, emit)
	res.Usage.CachedTokens = cached
	for _, c := range res.Choices {
		res.Usage.CompletionTokens += c.Tokens
		res.Usage.ReasoningTokens += c.ReasoningTokens
	}
	m.logGeneration(ctx, p, res, err)
	if err != nil {
		return res, err
	}
	return res, nil
}

// runChoices generates the choices at once, each a sequence of the
// scheduler's batch, their events passed to emit one at a time. The first
// error (from emit, the scheduler or ctx) cancels the other choices and
// is returned. It returns the prompt tokens the first choice reused from
// the prefix cache.
func (m *Model) runChoices(ctx context.Context, p *Prepared, choices []Choice, emit func(Event) error) (int, error) {
	if len(choices) == 1 {
		return m.runChoice(ctx, p, 0, &choices[0], emit)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	serial := func(ev Event) error {
		mu.Lock()
		defer mu.Unlock()
		return emit(ev)
	}
	type outcome struct {
		cached int
		err    error
		panic  any
	}
	out := make([]outcome, len(choices))
	var wg sync.WaitGroup
	for i := range choices {
		wg.Go(func() {
			// A panic below is re-raised on the request's goroutine,
			// where the handler recovers it.
			defer func() {
				if v := recover(); v != nil {
					out[i].panic = v
					cancel()
				}
			}()
			out[i].cached, out[i].err = m.runChoice(ctx, p, i, &choices[i], serial)
			if out[i].err != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	var first error
	for _, o := range out {
		if o.panic != nil {
			panic(o.panic)
		}
		// The choice that failed first is the one whose error is not
		// the cancellation it caused in the others.
		if o.err != nil && (first == nil || errors.Is(first, context.Canceled) && !errors.Is(o.err, context.Canceled)) {
			first = o.err
		}
	}
	return out[0].cached, first
}

// logGeneration logs a finished request, without its text unless the
// server logs content.
func (m *Model) logGeneration(ctx context.Context, p *Prepared, res *Result, err error) {
	log := m.srv.log
	attrs := []slog.Attr{
		slog.String("request_id", RequestID(ctx)),
		slog.String("model", m.id),
		slog.Int("prompt_tokens", res.Usage.PromptTokens),
		slog.Int("cached_tokens", res.Usage.CachedTokens),
		slog.Int("completion_tokens", res.Usage.CompletionTokens),
		durationMS(time.Since(p.arrived)),
	}
	if len(res.Choices) > 0 {
		attrs = append(attrs, slog.String("finish", res.Choices[0].Finish))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if m.srv.cfg.LogContent {
		attrs = append(attrs, slog.String("prompt", p.text))
		if len(res.Choices) > 0 {
			c := res.Choices[0]
			attrs = append(attrs, slog.String("reasoning", c.Reasoning), slog.String("content", c.Content))
		}
	}
	log.LogAttrs(ctx, slog.LevelInfo, "generation", attrs...)
}

// choiceRun is the state of one choice being generated.
type choiceRun struct {
	m       *Model
	p       *Prepared
	index   int
	choice  *Choice
	emit    func(Event) error
	stop    *stopMatcher
	parser  eventParser
	pending []TokenLogprob
	last    time.Time
	first   bool

	// The policy filter (nil without one): content and reasoning are
	// filtered as they stream; field is the one last fed.
	pol                  *Policy
	polContent, polReasn *policyStream
	polField             outputKind
	refused              bool

	content, reasoning strings.Builder
}

// finish stores the text gathered into the choice.
func (r *choiceRun) finish() {
	r.choice.Content = r.content.String()
	r.choice.Reasoning = r.reasoning.String()
}

// runChoice generates choice i into c and returns the prompt tokens reused
// from the prefix cache.
func (m *Model) runChoice(ctx context.Context, p *Prepared, i int, c *Choice, emit func(Event) error) (int, error) {
	req := p.req
	if p.maxTokens == 0 {
		// Nothing to generate (Request.ZeroTokens).
		c.Finish = FinishLength
		return 0, emit(Event{Kind: EventEnd, Choice: i, Finish: FinishLength})
	}
	sample := req.Sample
	if i > 0 && sample.HasSeed {
		sample.Seed += uint64(i)
	}
	r := &choiceRun{m: m, p: p, index: i, choice: c, emit: emit, first: true, stop: newStopMatcher(req.Stop)}
	if pol := m.srv.cfg.Policy; pol != nil {
		route, _ := ctx.Value(routeKey).(string)
		_, path, _ := strings.Cut(route, " ")
		scope := &policyScope{ctx: ctx, model: m.id, dialect: dialectOf(path)}
		r.pol, r.polContent, r.polReasn = pol, pol.newStream(scope, "content"), pol.newStream(scope, "reasoning")
	}
	switch {
	case len(req.Messages) > 0 && (!req.JSON && req.Schema == nil || m.channels(req) != nil):
		// A format with channels writes its JSON in the answer's channel.
		r.parser = m.format.NewParser(p.inReasoning, p.toolsOffered)
	case p.reasonFirst:
		// Reasoning, then the JSON value: no tool calls in it.
		r.parser = m.format.NewParser(p.inReasoning, false)
	default:
		r.parser = plainText{}
	}
	ereq := engine.Request{Prompt: p.ids, Sample: sample, MaxTokens: p.maxTokens,
		Logprobs: req.Logprobs, TopLogprobs: req.TopLogprobs, IgnoreModelStops: req.IgnoreEOS}
	switch {
	case p.grammar != nil:
		ereq.Constraint = p.grammar.New(m.eng.StopIDs)
	case p.json != nil:
		ereq.Constraint = p.json(m.eng.StopIDs)
	}
	res, err := m.sched.Generate(ctx, ereq, r.onToken)
	kept := 0
	if res != nil {
		c.Tokens = len(res.IDs)
		kept = res.CachedTokens
	}
	switch {
	case errors.Is(err, errStopSequence):
		c.Finish = FinishStop
	case errors.Is(err, errPolicyRefused):
		c.Finish = FinishContentFilter
	case err != nil:
		r.finish()
		return kept, err
	default:
		if res.StopReason == engine.StopToken {
			c.Finish = FinishStop
			if err := r.scoreStop(ctx, res); err != nil {
				r.finish()
				return kept, err
			}
		} else {
			c.Finish = FinishLength
		}
		if err := r.deliver(r.parser.Feed(r.stop.flush())); err != nil {
			r.finish()
			return kept, err
		}
	}
	err = r.deliver(r.parser.Finish())
	if err == nil {
		err = r.flushPolicy()
	}
	r.finish()
	if err != nil {
		return kept, err
	}
	switch {
	case r.refused:
		c.Finish, c.StopSequence = FinishContentFilter, ""
	case len(c.ToolCalls) > 0:
		c.Finish = FinishToolCalls
	}
	end := Event{Kind: EventEnd, Choice: i, Finish: c.Finish, StopSequence: c.StopSequence, Logprobs: r.pending}
	r.pending = nil
	return kept, emit(end)
}

// onToken is the engine callback: it times the token, records its
// logprob, passes its text through the stop matcher and the output parser
// and emits the events that result.
func (r *choiceRun) onToken(t engine.Token) error {
	now := time.Now()
	if t.ID >= 0 {
		if r.first {
			r.m.obs.ttft.Observe(now.Sub(r.p.arrived).Seconds())
			r.first = false
		} else {
			r.m.obs.itl.Observe(now.Sub(r.last).Seconds())
		}
		r.last = now
		r.m.obs.genTokens.Inc()
		if r.p.req.Logprobs {
			r.addLogprob(t)
		}
	}
	text, stopped := r.stop.push(t.Text)
	if stopped {
		r.choice.StopSequence = r.stop.matched
	}
	// A token is reasoning when the output was inside reasoning before
	// it or is after it: the markers that open and close reasoning count
	// with it.
	before := r.parser.Reasoning()
	if err := r.deliver(r.parser.Feed(text)); err != nil {
		return err
	}
	if t.ID >= 0 && (before || r.parser.Reasoning()) {
		r.choice.ReasoningTokens++
	}
	if r.refused {
		return errPolicyRefused
	}
	if stopped {
		return errStopSequence
	}
	return nil
}

func (r *choiceRun) addLogprob(t engine.Token) {
	tok := r.m.eng.Tokenizer
	lp := TokenLogprob{ID: t.ID, Token: tokenText(tok.Decode([]int32{t.ID}, false)), Logprob: t.Logprob}
	if len(t.Top) > 0 {
		lp.Top = make([]TopLogprob, len(t.Top))
		for i, c := range t.Top {
			lp.Top[i] = TopLogprob{ID: c.ID, Token: tokenText(tok.Decode([]int32{c.ID}, false)), Logprob: c.Logprob}
		}
	}
	r.pending = append(r.pending, lp)
	r.choice.Logprobs = append(r.choice.Logprobs, lp)
}

// tokenText makes a token's text valid UTF-8.
func tokenText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// deliver turns parser events into Events, records them in the choice and
// emits them, through the policy filter when there is one.
func (r *choiceRun) deliver(evs []outputEvent) error {
	for _, ev := range evs {
		var err error
		if r.pol != nil {
			err = r.deliverPolicy(ev)
		} else {
			err = r.send(ev)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// deliverPolicy passes one parser event through the policy filter. Text
// held back by one field's filter is released before another field's
// event, so that the events keep their order; after a refusal nothing
// more is sent.
func (r *choiceRun) deliverPolicy(ev outputEvent) error {
	if r.refused {
		return nil
	}
	switch ev.Kind {
	case outputReasoning:
		if r.polField != outputReasoning {
			if err := r.flushField(outputContent); err != nil || r.refused {
				return err
			}
		}
		r.polField = outputReasoning
		return r.pushField(outputReasoning, ev.Text, false)
	case outputToolCall:
		if ev.Call == nil {
			return nil
		}
		if err := r.flushPolicy(); err != nil || r.refused {
			return err
		}
		args := bytes.TrimSpace(ev.Call.Arguments)
		if len(args) == 0 || string(args) == "null" {
			args = []byte("{}")
		}
		if !json.Valid(args) || ev.Call.Name == "" {
			// Sent as content (see send): filter it as content.
			r.polField = outputContent
			return r.pushField(outputContent, ev.Call.Name+string(args), true)
		}
		name, msg, refused := r.pol.filterAll(r.polContent.scope, "tool_name", ev.Call.Name)
		if refused {
			return r.refuse(msg)
		}
		out, msg, refused := r.pol.filterArgs(r.polContent.scope, args)
		if refused {
			return r.refuse(msg)
		}
		call := *ev.Call
		call.Name, call.Arguments = name, out
		ev.Call = &call
		return r.send(ev)
	default:
		if r.polField != outputContent {
			if err := r.flushField(outputReasoning); err != nil || r.refused {
				return err
			}
		}
		r.polField = outputContent
		return r.pushField(outputContent, ev.Text, false)
	}
}

// pushField filters text of a field and sends what is released.
func (r *choiceRun) pushField(kind outputKind, text string, final bool) error {
	f := r.polContent
	if kind == outputReasoning {
		f = r.polReasn
	}
	out, refused := f.push(text, final)
	if refused {
		if err := r.send(outputEvent{Kind: kind, Text: out}); err != nil {
			return err
		}
		return r.refuse(f.refusal)
	}
	return r.send(outputEvent{Kind: kind, Text: out})
}

// flushField releases what a field's filter holds back.
func (r *choiceRun) flushField(kind outputKind) error {
	return r.pushField(kind, "", true)
}

// flushPolicy releases what both filters hold back.
func (r *choiceRun) flushPolicy() error {
	if r.pol == nil || r.refused {
		return nil
	}
	if err := r.flushField(outputReasoning); err != nil || r.refused {
		return err
	}
	return r.flushField(outputContent)
}

// refuse sends a refusal's message as content and ends the choice's
// output.
func (r *choiceRun) refuse(msg string) error {
	r.refused = true
	return r.send(outputEvent{Kind: outputContent, Text: msg})
}

// send turns one parser event into an Event, records it in the choice and
// emits it.
func (r *choiceRun) send(ev outputEvent) error {
	e := Event{Choice: r.index}
	switch ev.Kind {
	case outputReasoning:
		if ev.Text == "" {
			return nil
		}
		e.Kind, e.Text = EventReasoning, ev.Text
		r.reasoning.WriteString(ev.Text)
	case outputToolCall:
		if ev.Call == nil {
			return nil
		}
		args := bytes.TrimSpace(ev.Call.Arguments)
		if len(args) == 0 || string(args) == "null" {
			args = []byte("{}")
		}
		if !json.Valid(args) || ev.Call.Name == "" {
			// Not a usable call: keep it as text rather than fail.
			e.Kind, e.Text = EventContent, ev.Call.Name+string(args)
			r.content.WriteString(e.Text)
			break
		}
		call := ToolCall{Index: len(r.choice.ToolCalls), ID: NewID("call_"), Name: ev.Call.Name, Arguments: json.RawMessage(args)}
		r.choice.ToolCalls = append(r.choice.ToolCalls, call)
		e.Kind, e.Call = EventToolCall, &call
	default:
		if ev.Text == "" {
			return nil
		}
		e.Kind, e.Text = EventContent, ev.Text
		r.content.WriteString(ev.Text)
	}
	if len(r.pending) > 0 {
		e.Logprobs, r.pending = r.pending, nil
	}
	return r.emit(e)
}

// NewID returns prefix followed by 24 random characters.
func NewID(prefix string) string {
	return prefix + rand.Text()[:24]
}

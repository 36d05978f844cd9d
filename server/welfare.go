package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/engine"
)

// The welfare guard (opt-in: Config.Welfare, lem serve --welfare). On each
// chat request whose last message is the user's, it scores the message's
// hostility and that of the recent user turns (welfare_score.go). When the
// score triggers it, the served model itself is asked, in a separate short
// greedy generation with a fixed instruction (welfareInstruction), whether
// to proceed, rephrase the user's message or pause the conversation; its
// answer is parsed by parseWelfareDecision. The decision applies to this
// request only:
//
//   - PROCEED, or an answer that does not parse, or a mediation that
//     fails: the request goes on unchanged;
//   - REPHRASE: the model answers the rephrased message in place of the
//     user's last one;
//   - PAUSE: the client gets the friendly text as the assistant's reply,
//     in the dialect's usual shape (streamed when asked), finish "stop";
//     nothing else is generated.
//
// Every trigger is audited. The model's own output is never looked at.
// Raw completions (OpenAI /v1/completions, Ollama raw generate, FIM) are
// not chat turns and are not scored.

// WelfareConfig turns on the welfare guard and sets its thresholds.
type WelfareConfig struct {
	// Words extend the built-in list of insults and profanity (in plain
	// spelling; see ReadWelfareWords).
	Words []string
	// Threshold is the score of one message that triggers the guard
	// (0: DefaultWelfareThreshold).
	Threshold float64
	// Sustained is the decayed sum over the recent user turns that
	// triggers the guard when the last message is hostile at all
	// (0: DefaultWelfareSustained).
	Sustained float64
	// Turns is how many user turns the sum covers, the last included
	// (0: DefaultWelfareTurns).
	Turns int
	// Decay is the weight of each earlier turn relative to the one after
	// it, in (0, 1] (0: DefaultWelfareDecay).
	Decay float64
	// Audit receives one JSON object a line per trigger; nil logs the
	// trigger to the server's log instead.
	Audit io.Writer
	// AuditText adds the user's message and the mediation's answer to the
	// audit; off, neither is recorded.
	AuditText bool
	// Mediator decides what to do about a triggering message; nil asks
	// the served model (ModelMediator).
	Mediator Mediator
}

// A Mediator is asked what to do about a user message that triggered the
// welfare guard. It returns an answer in the format parseWelfareDecision
// reads: "PROCEED", "REPHRASE: <text>" or "PAUSE: <text>".
type Mediator interface {
	Mediate(ctx context.Context, m *Model, message string) (string, error)
}

// welfareInstruction is the fixed instruction of ModelMediator.
const welfareInstruction = `You moderate a conversation between a user and an AI assistant. The user's latest message, below, looks hostile. Choose one answer and reply with it alone:
PROCEED - the message can be answered as it is.
REPHRASE: <the same request, written calmly and politely>
PAUSE: <a short, friendly reply that pauses the conversation>`

// welfareMaxTokens bounds the mediation's answer.
const welfareMaxTokens = 64

// ModelMediator asks the served model, in a greedy generation of at most
// 64 tokens with thinking off, with welfareInstruction as the system
// message and the user's message as the user's. The generation waits in
// the model's queue like any request.
type ModelMediator struct{}

// Mediate implements Mediator.
func (ModelMediator) Mediate(ctx context.Context, m *Model, message string) (string, error) {
	req := &Request{
		Messages: []chat.Message{
			{Role: "system", Content: chat.Text(welfareInstruction)},
			{Role: "user", Content: chat.Text(message)},
		},
		Kwargs:         map[string]any{"enable_thinking": false},
		MaxTokens:      welfareMaxTokens,
		MaxTokensBound: true,
		Sample:         engine.SampleParams{Temperature: 0},
		mediation:      true,
	}
	p, err := m.PrepareContext(ctx, req)
	if err != nil {
		return "", fmt.Errorf("preparing the mediation: %w", err)
	}
	res, err := m.Generate(ctx, p, nil)
	if err != nil {
		return "", fmt.Errorf("generating the mediation: %w", err)
	}
	return res.Choices[0].Content, nil
}

// Welfare decisions.
const (
	welfareProceed  = "proceed"
	welfareRephrase = "rephrase"
	welfarePause    = "pause"
)

// parseWelfareDecision reads a mediation's answer: leading and trailing
// space is ignored and the keywords are matched in any case. "PROCEED"
// (anything after it ignored) proceeds; "REPHRASE:" and "PAUSE:" take the
// rest of the answer, trimmed, as their text, which must not be empty.
// Anything else is not a decision (ok false).
func parseWelfareDecision(answer string) (decision, text string, ok bool) {
	a := strings.TrimSpace(answer)
	for _, d := range []string{welfareProceed, welfareRephrase, welfarePause} {
		kw := d
		if len(a) < len(kw) || !strings.EqualFold(a[:len(kw)], kw) {
			continue
		}
		rest := strings.TrimLeft(a[len(kw):], " \t")
		if d == welfareProceed {
			if rest == "" || !isWordRune([]rune(rest)[0]) {
				return d, "", true
			}
			return "", "", false
		}
		rest, found := strings.CutPrefix(rest, ":")
		rest = strings.TrimSpace(rest)
		if !found || rest == "" {
			return "", "", false
		}
		return d, rest, true
	}
	return "", "", false
}

// welfareOutcome is what the guard decided about a request; Ollama's
// truncation prepares a request again, and the outcome carries over.
type welfareOutcome struct {
	decision string // "" when the guard was not triggered
	text     string // the rephrased message or the pause reply
}

// welfareGuard is a server's welfare guard.
type welfareGuard struct {
	cfg    WelfareConfig
	scorer *welfareScorer
	med    Mediator
	mu     sync.Mutex // serialises audit lines
}

func newWelfareGuard(cfg *WelfareConfig) (*welfareGuard, error) {
	sc, err := newWelfareScorer(cfg)
	if err != nil {
		return nil, err
	}
	g := &welfareGuard{cfg: *cfg, scorer: sc, med: cfg.Mediator}
	if g.med == nil {
		g.med = ModelMediator{}
	}
	return g, nil
}

// messageText returns the text of a message's content.
func messageText(c chat.Content) string {
	if !c.IsParts() {
		return c.Text()
	}
	var b strings.Builder
	for _, p := range c.Parts() {
		switch p.Type {
		case "text", "input_text", "output_text":
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// welfare applies the guard to a chat request, once: it returns the
// request to prepare (req, or a copy whose last message is rephrased) and
// the pause reply, if any.
func (m *Model) welfare(ctx context.Context, req *Request) (*Request, string) {
	g := m.srv.welfare
	if g == nil || req.mediation || len(req.Messages) == 0 || req.Messages[len(req.Messages)-1].Role != "user" {
		return req, ""
	}
	if req.welfare == nil {
		req.welfare = m.welfareDecide(ctx, g, req)
	}
	switch o := req.welfare; o.decision {
	case welfareRephrase:
		r := *req
		r.Messages = append([]chat.Message(nil), req.Messages...)
		last := &r.Messages[len(r.Messages)-1]
		last.Content = chat.Text(o.text)
		return &r, ""
	case welfarePause:
		return req, o.text
	}
	return req, ""
}

// welfareDecide scores the request's user turns and, when they trigger
// the guard, mediates and audits.
func (m *Model) welfareDecide(ctx context.Context, g *welfareGuard, req *Request) *welfareOutcome {
	var user []string
	for _, msg := range req.Messages {
		if msg.Role == "user" {
			user = append(user, messageText(msg.Content))
		}
	}
	m.srv.metrics.welfareScored.Inc()
	score, triggered := g.scorer.score(user)
	if !triggered {
		return &welfareOutcome{}
	}
	last := user[len(user)-1]
	answer, err := g.med.Mediate(ctx, m, last)
	mediation := "ok"
	decision, text, ok := parseWelfareDecision(answer)
	switch {
	case err != nil:
		mediation, decision, text = "failed", welfareProceed, ""
	case !ok:
		mediation, decision = "unparseable", welfareProceed
	}
	m.srv.metrics.welfareTriggers.WithLabelValues(decision, mediation).Inc()
	g.audit(ctx, m, welfareAudit{Score: score, Decision: decision, Mediation: mediation, err: err, text: last, answer: answer, reply: text})
	return &welfareOutcome{decision: decision, text: text}
}

// welfareAudit is one audit line.
type welfareAudit struct {
	Time      string       `json:"time"`
	RequestID string       `json:"request_id"`
	Model     string       `json:"model"`
	Score     WelfareScore `json:"score"`
	Decision  string       `json:"decision"`
	// Mediation is "ok", "unparseable" (the answer was not a decision)
	// or "failed" (Error says why).
	Mediation string `json:"mediation"`
	Error     string `json:"error,omitempty"`
	// Text, Answer and Reply (the rephrased message or the pause reply)
	// only with WelfareConfig.AuditText.
	Text   string `json:"text,omitempty"`
	Answer string `json:"answer,omitempty"`
	Reply  string `json:"reply,omitempty"`

	err                 error
	text, answer, reply string
}

func (g *welfareGuard) audit(ctx context.Context, m *Model, a welfareAudit) {
	a.Time = time.Now().UTC().Format(time.RFC3339Nano)
	a.RequestID, a.Model = RequestID(ctx), m.id
	if a.err != nil {
		a.Error = a.err.Error()
	}
	if g.cfg.AuditText {
		a.Text, a.Answer, a.Reply = a.text, a.answer, a.reply
	}
	if g.cfg.Audit == nil {
		attrs := []slog.Attr{slog.String("request_id", a.RequestID), slog.String("model", a.Model),
			slog.Any("score", a.Score), slog.String("decision", a.Decision), slog.String("mediation", a.Mediation)}
		if a.Error != "" {
			attrs = append(attrs, slog.String("error", a.Error))
		}
		if g.cfg.AuditText {
			attrs = append(attrs, slog.String("text", a.Text), slog.String("answer", a.Answer), slog.String("reply", a.Reply))
		}
		m.srv.log.LogAttrs(ctx, slog.LevelWarn, "welfare trigger", attrs...)
		return
	}
	line, err := json.Marshal(a)
	if err != nil {
		m.srv.log.Error("welfare audit", "error", err)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := g.cfg.Audit.Write(append(line, '\n')); err != nil {
		m.srv.log.Error("writing the welfare audit", "request_id", a.RequestID, "error", err)
	}
}

// pauseReply answers a paused request with the guard's friendly text as
// every choice's content, finish "stop", without the model.
func (m *Model) pauseReply(ctx context.Context, p *Prepared, emit func(Event) error) (*Result, error) {
	if emit == nil {
		emit = func(Event) error { return nil }
	}
	tokens := len(m.eng.Tokenizer.Encode(p.pause, false))
	res := &Result{Choices: make([]Choice, p.n), Usage: Usage{PromptTokens: len(p.ids)}}
	if err := emit(Event{Kind: EventStart}); err != nil {
		return nil, err
	}
	for i := range res.Choices {
		res.Choices[i] = Choice{Content: p.pause, Finish: FinishStop, Tokens: tokens}
		res.Usage.CompletionTokens += tokens
		if err := emit(Event{Kind: EventContent, Choice: i, Text: p.pause}); err != nil {
			return res, err
		}
		if err := emit(Event{Kind: EventEnd, Choice: i, Finish: FinishStop}); err != nil {
			return res, err
		}
	}
	m.logGeneration(ctx, p, res, nil)
	return res, nil
}

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"regexp/syntax"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The outbound policy filter (--policy FILE) guards what the model sends
// back: rules of literal terms (matched case-insensitively) and regular
// expressions (Go's RE2 syntax), each with an action: redact (replace the
// match), refuse (end the reply at the match with a message, finish reason
// content_filter) or rewrite (ask the deployer's HTTP mediator for a
// replacement). It runs once, in the core (choiceRun.deliver), over the
// content, the reasoning and the string values of tool-call arguments of
// every dialect, streamed or not.
//
// Matching is defined on the whole text, and streaming reproduces it
// exactly: at each position, from the start, the rules are tried in order,
// each anchored there and over at most its window of bytes; the first rule
// that matches (a non-empty match, leftmost-first as Go's regexp) acts on
// the match, and the scan goes on after it; where none matches, one rune is
// released. A stream holds back text from a position only while a rule
// could still match there with more text (its automaton has live threads
// and fewer than window bytes have been seen); every other byte is released
// at once.

// Policy defaults and bounds.
const (
	DefaultPolicyWindow          = 256 // bytes a match may span
	MaxPolicyWindow              = 64 << 10
	DefaultPolicyReplacement     = "[redacted]"
	DefaultPolicyMessage         = "The reply was stopped by the server's content policy."
	DefaultPolicyMediatorTimeout = 5 * time.Second
	maxPolicyRules               = 4096
)

// FinishContentFilter is the finish reason of a reply a policy rule
// refused.
const FinishContentFilter = "content_filter"

// policyFile is the JSON form of a policy file.
type policyFile struct {
	Window            int              `json:"window"`
	Rules             []policyRuleFile `json:"rules"`
	Mediator          string           `json:"mediator"`
	MediatorTimeoutMS int              `json:"mediator_timeout_ms"`
	AuditText         bool             `json:"audit_text"`
}

type policyRuleFile struct {
	Match       string `json:"match"`
	Value       string `json:"value"`
	Action      string `json:"action"`
	Replacement string `json:"replacement"`
	Message     string `json:"message"`
	Window      int    `json:"window"`
}

// Policy is a compiled outbound policy. It is safe for concurrent use.
type Policy struct {
	rules []*policyRule
	// Mediator is the URL rewrite rules POST their matches to ("": none,
	// and rewrite redacts).
	Mediator string
	// MediatorTimeout bounds each call to the mediator.
	MediatorTimeout time.Duration
	// AuditText puts the matched text in audit lines.
	AuditText bool
	// Audit receives one JSON line per action (nil: none).
	Audit io.Writer

	client  *http.Client
	auditMu sync.Mutex
}

type policyRule struct {
	index       int
	match       string // "term" or "pattern"
	action      string // "redact", "refuse" or "rewrite"
	replacement string
	message     string
	window      int
	re          *regexp.Regexp // anchored at the start
	prog        *syntax.Prog
}

// LoadPolicy reads and compiles the policy file at path.
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// ParsePolicy compiles a policy from its JSON form. Unknown fields, an
// unknown match kind or action, an empty value, a regular expression that
// does not compile, matches the empty string or uses an empty-width
// assertion (^ $ \A \z \b \B), and a window out of range are errors.
func ParsePolicy(data []byte) (*Policy, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f policyFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("bad JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("bad JSON: more than one value")
	}
	if f.Window < 0 || f.Window > MaxPolicyWindow {
		return nil, fmt.Errorf("window %d: want 1 to %d bytes (0: %d)", f.Window, MaxPolicyWindow, DefaultPolicyWindow)
	}
	if f.Window == 0 {
		f.Window = DefaultPolicyWindow
	}
	if len(f.Rules) == 0 {
		return nil, errors.New("no rules")
	}
	if len(f.Rules) > maxPolicyRules {
		return nil, fmt.Errorf("%d rules: at most %d", len(f.Rules), maxPolicyRules)
	}
	if f.MediatorTimeoutMS < 0 {
		return nil, fmt.Errorf("mediator_timeout_ms %d: negative", f.MediatorTimeoutMS)
	}
	p := &Policy{Mediator: f.Mediator, MediatorTimeout: DefaultPolicyMediatorTimeout, AuditText: f.AuditText, client: &http.Client{}}
	if f.MediatorTimeoutMS > 0 {
		p.MediatorTimeout = time.Duration(f.MediatorTimeoutMS) * time.Millisecond
	}
	for i, rf := range f.Rules {
		r, err := compilePolicyRule(i, rf, f.Window)
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		p.rules = append(p.rules, r)
	}
	return p, nil
}

func compilePolicyRule(i int, rf policyRuleFile, window int) (*policyRule, error) {
	r := &policyRule{index: i, match: rf.Match, action: rf.Action, replacement: rf.Replacement, message: rf.Message, window: window}
	if rf.Value == "" {
		return nil, errors.New("empty value")
	}
	var expr string
	switch rf.Match {
	case "term":
		expr = "(?i)" + regexp.QuoteMeta(rf.Value)
	case "pattern":
		expr = rf.Value
	default:
		return nil, fmt.Errorf("match %q: want \"term\" or \"pattern\"", rf.Match)
	}
	switch rf.Action {
	case "redact", "rewrite":
		if r.replacement == "" {
			r.replacement = DefaultPolicyReplacement
		}
	case "refuse":
		if r.message == "" {
			r.message = DefaultPolicyMessage
		}
	default:
		return nil, fmt.Errorf("action %q: want \"redact\", \"refuse\" or \"rewrite\"", rf.Action)
	}
	if rf.Window < 0 || rf.Window > MaxPolicyWindow {
		return nil, fmt.Errorf("window %d: want 1 to %d bytes (0: the file's)", rf.Window, MaxPolicyWindow)
	}
	if rf.Window > 0 {
		r.window = rf.Window
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", rf.Value, err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", rf.Value, err)
	}
	for _, in := range prog.Inst {
		if in.Op == syntax.InstEmptyWidth {
			return nil, fmt.Errorf("pattern %q: empty-width assertions (^ $ \\A \\z \\b \\B) are not supported", rf.Value)
		}
	}
	r.prog = prog
	r.re, err = regexp.Compile(`\A(?:` + expr + `)`)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", rf.Value, err)
	}
	if r.re.MatchString("") {
		return nil, fmt.Errorf("pattern %q matches the empty string", rf.Value)
	}
	return r, nil
}

// policyThreads is a set of program counters (a sparse set) for
// simulating a rule's automaton without allocating.
type policyThreads struct {
	dense  []uint32
	sparse []uint32
}

func newPolicyThreads(n int) policyThreads {
	return policyThreads{dense: make([]uint32, 0, n), sparse: make([]uint32, n)}
}

func (s *policyThreads) has(pc uint32) bool {
	i := s.sparse[pc]
	return int(i) < len(s.dense) && s.dense[i] == pc
}

func (s *policyThreads) add(pc uint32) {
	s.sparse[pc] = uint32(len(s.dense))
	s.dense = append(s.dense, pc)
}

// policySim simulates one rule's automaton anchored at a position.
type policySim struct {
	cur, next policyThreads
}

func (s *policySim) follow(prog *syntax.Prog, set *policyThreads, pc uint32, matched *bool) {
	if set.has(pc) {
		return
	}
	set.add(pc)
	in := &prog.Inst[pc]
	switch in.Op {
	case syntax.InstAlt, syntax.InstAltMatch:
		s.follow(prog, set, in.Out, matched)
		s.follow(prog, set, in.Arg, matched)
	case syntax.InstNop, syntax.InstCapture:
		s.follow(prog, set, in.Out, matched)
	case syntax.InstMatch:
		*matched = true
	}
}

// alive runs the rule's automaton over text (anchored at its start) and
// reports whether it could still consume more (a match starting there
// could still change with more text) and whether it reached a match.
func (s *policySim) alive(prog *syntax.Prog, text []byte) (alive, matched bool) {
	s.cur.dense = s.cur.dense[:0]
	s.follow(prog, &s.cur, uint32(prog.Start), &matched)
	for len(text) > 0 {
		if !consuming(prog, &s.cur) {
			return false, matched
		}
		if !utf8.FullRune(text) {
			return true, matched
		}
		r, size := utf8.DecodeRune(text)
		text = text[size:]
		s.next.dense = s.next.dense[:0]
		for _, pc := range s.cur.dense {
			in := &prog.Inst[pc]
			switch in.Op {
			case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
				if in.MatchRune(r) {
					s.follow(prog, &s.next, in.Out, &matched)
				}
			}
		}
		s.cur, s.next = s.next, s.cur
	}
	return consuming(prog, &s.cur), matched
}

// consuming reports whether a thread of set waits for a rune.
func consuming(prog *syntax.Prog, set *policyThreads) bool {
	for _, pc := range set.dense {
		switch prog.Inst[pc].Op {
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			return true
		}
	}
	return false
}

// policyScope is what a filter knows of its request, for the mediator
// and the audit log.
type policyScope struct {
	ctx     context.Context
	model   string
	dialect string
}

// policyStream filters one text (a choice's content or reasoning) as it
// streams.
type policyStream struct {
	p     *Policy
	scope *policyScope
	field string
	held  []byte
	out   []byte
	// refusal is the message of the refuse rule that matched.
	refusal string
	sims    []policySim
}

func (p *Policy) newStream(scope *policyScope, field string) *policyStream {
	f := &policyStream{p: p, scope: scope, field: field, sims: make([]policySim, len(p.rules))}
	for i, r := range p.rules {
		n := len(r.prog.Inst)
		f.sims[i] = policySim{cur: newPolicyThreads(n), next: newPolicyThreads(n)}
	}
	return f
}

// push adds text and returns what can be released. final says the text
// ends here: nothing is held back. refused is true when a refuse rule
// matched: out then ends before the match, refusal holds the rule's
// message, and the stream must not be used again.
func (f *policyStream) push(text string, final bool) (out string, refused bool) {
	if len(f.held) == 0 && text == "" && !final {
		return "", false
	}
	f.held = append(f.held, text...)
	f.out = f.out[:0]
	pos := 0
scan:
	for pos < len(f.held) {
		rest := f.held[pos:]
		for i, r := range f.p.rules {
			var m []int
			if len(rest) >= r.window {
				m = r.re.FindIndex(rest[:r.window])
			} else {
				alive, matched := f.sims[i].alive(r.prog, rest)
				if alive && !final {
					break scan // r could still match here: hold back
				}
				if matched || alive {
					m = r.re.FindIndex(rest)
				}
			}
			if m == nil || m[1] == 0 {
				continue
			}
			span := rest[:m[1]]
			switch r.action {
			case "refuse":
				f.p.record(f.scope, r, f.field, "refuse", span, "")
				f.refusal = r.message
				f.held = f.held[:0]
				return string(f.out), true
			case "rewrite":
				f.out = append(f.out, f.p.rewrite(f.scope, r, f.field, span)...)
			default:
				f.p.record(f.scope, r, f.field, "redact", span, "")
				f.out = append(f.out, r.replacement...)
			}
			pos += m[1]
			continue scan
		}
		if !final && !utf8.FullRune(rest) {
			break
		}
		_, size := utf8.DecodeRune(rest)
		f.out = append(f.out, rest[:size]...)
		pos += size
	}
	n := copy(f.held, f.held[pos:])
	f.held = f.held[:n]
	return string(f.out), false
}

// filterAll filters a whole text at once. When a refuse rule matches,
// refused is true and msg is its message.
func (p *Policy) filterAll(scope *policyScope, field, text string) (out, msg string, refused bool) {
	f := p.newStream(scope, field)
	out, refused = f.push(text, true)
	return out, f.refusal, refused
}

// record appends one line to the audit log.
func (p *Policy) record(scope *policyScope, r *policyRule, field, action string, span []byte, note string) {
	if p.Audit == nil {
		return
	}
	line := struct {
		Time      string `json:"time"`
		RequestID string `json:"request_id"`
		Model     string `json:"model"`
		Dialect   string `json:"dialect"`
		Rule      int    `json:"rule"`
		Match     string `json:"match"`
		Action    string `json:"action"`
		Field     string `json:"field"`
		Note      string `json:"note,omitempty"`
		Text      string `json:"text,omitempty"`
	}{time.Now().UTC().Format(time.RFC3339Nano), RequestID(scope.ctx), scope.model, scope.dialect, r.index, r.match, action, field, note, ""}
	if p.AuditText {
		line.Text = string(span)
	}
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	b = append(b, '\n')
	p.auditMu.Lock()
	defer p.auditMu.Unlock()
	_, _ = p.Audit.Write(b)
}

// rewrite asks the mediator for the span's replacement. Its answer is
// checked against the rules; on any failure, or an answer that matches a
// rule, the span is redacted.
func (p *Policy) rewrite(scope *policyScope, r *policyRule, field string, span []byte) string {
	text, err := p.mediate(scope, r, span)
	if err == nil {
		if out, _, refused := p.filterAllQuiet(text); refused || out != text {
			err = errors.New("the mediator's answer matches a rule")
		}
	}
	if err != nil {
		p.record(scope, r, field, "redact", span, "rewrite failed: "+err.Error())
		return r.replacement
	}
	p.record(scope, r, field, "rewrite", span, "")
	return text
}

// filterAllQuiet filters text without auditing or mediating: a rewrite
// rule's match counts as a change.
func (p *Policy) filterAllQuiet(text string) (string, string, bool) {
	q := &Policy{rules: make([]*policyRule, len(p.rules))}
	for i, r := range p.rules {
		c := *r
		if c.action == "rewrite" {
			c.action = "redact"
		}
		q.rules[i] = &c
	}
	return q.filterAll(&policyScope{ctx: context.Background()}, "", text)
}

func (p *Policy) mediate(scope *policyScope, r *policyRule, span []byte) (string, error) {
	if p.Mediator == "" {
		return "", errors.New("no mediator configured")
	}
	body, err := json.Marshal(map[string]any{"text": string(span), "rule": r.index, "request_id": RequestID(scope.ctx)})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(scope.ctx), p.MediatorTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Mediator, bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("mediator: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("mediator: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("mediator: status %d", resp.StatusCode)
	}
	var ans struct {
		Text *string `json:"text"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans); err != nil {
		return "", fmt.Errorf("mediator: %w", err)
	}
	if ans.Text == nil {
		return "", errors.New("mediator: no text in its answer")
	}
	return *ans.Text, nil
}

// filterArgs filters the string values (and keys) of a tool call's JSON
// arguments. refused is true when a refuse rule matched; msg is then its
// message.
func (p *Policy) filterArgs(scope *policyScope, args []byte) (out []byte, msg string, refused bool) {
	var b []byte
	for i := 0; i < len(args); {
		c := args[i]
		if c != '"' {
			b = append(b, c)
			i++
			continue
		}
		j := i + 1
		for j < len(args) && args[j] != '"' {
			if args[j] == '\\' {
				j++
			}
			j++
		}
		j = min(j+1, len(args))
		lit := args[i:j]
		i = j
		var s string
		if err := json.Unmarshal(lit, &s); err != nil {
			b = append(b, lit...)
			continue
		}
		f, msg, refused := p.filterAll(scope, "tool_arguments", s)
		if refused {
			return nil, msg, true
		}
		if f == s {
			b = append(b, lit...)
			continue
		}
		q, _ := json.Marshal(f)
		b = append(b, q...)
	}
	return b, "", false
}

// dialectOf names the dialect of a route's path, for the audit log.
func dialectOf(path string) string {
	switch {
	case strings.HasPrefix(path, "/api/"):
		return "ollama"
	case strings.HasPrefix(path, "/v1/messages"):
		return "anthropic"
	default:
		return "openai"
	}
}

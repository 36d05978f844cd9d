package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/constrain"
)

// This file turns a request's demands on the output into a grammar
// constraint (package constrain): a JSON schema, tool_choice required or a
// named function (a call in the syntax of the model's tool-call format,
// arguments held to the tool's parameters), tool_choice none (the format's
// call marker kept out), a reasoning budget, and thinking turned off. What
// a format writes comes from package chat (chat.ToolFormat); nothing here
// knows a format by name.

// anyObject is the schema of response_format json_object where a grammar
// holds the output (formats with channels, whose JSON goes in the answer's
// channel).
var anyObject = sync.OnceValue(func() *constrain.Schema {
	s, err := constrain.CompileSchema([]byte(`{"type": "object"}`))
	if err != nil {
		panic(err)
	}
	return s
})

// compileSchema compiles a request's JSON schema (response_format
// json_schema and the like), naming param in errors. A keyword the grammar
// cannot enforce is an error when the client asked for strict, and is
// otherwise left out as an annotation (see unenforcedHeader).
func compileSchema(raw json.RawMessage, param string, strict bool) (*constrain.Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, invalid(param, "is required")
	}
	compile := constrain.CompileSchemaLax
	if strict {
		compile = constrain.CompileSchema
	}
	s, err := compile(raw)
	if err != nil {
		var se *constrain.SchemaError
		if errors.As(err, &se) {
			p := param
			if se.Path != "" {
				p += strings.ReplaceAll(se.Path, "/", ".")
			}
			if se.Keyword != "" {
				p += "." + se.Keyword
			}
			return nil, invalid(p, "%v", err)
		}
		return nil, invalid(param, "%v", err)
	}
	return s, nil
}

// unenforcedHeader is the response header that lists the keywords of a
// request's schema that the output is not held to (JSON pointers into the
// schema, comma-separated).
const unenforcedHeader = "Lem-Schema-Unenforced"

// noteUnenforced sets unenforcedHeader when the request's schema has
// keywords that were left out.
func noteUnenforced(w http.ResponseWriter, req *Request) {
	if req.Schema == nil {
		return
	}
	if u := req.Schema.Unenforced(); len(u) > 0 {
		w.Header().Set(unenforcedHeader, strings.Join(u, ", "))
	}
}

// thinkingOff reports whether template variables turn thinking off
// (enable_thinking false, given as a value or as JSON).
func thinkingOff(kw map[string]any) bool {
	switch v := kw["enable_thinking"].(type) {
	case bool:
		return !v
	case json.RawMessage:
		return string(bytes.TrimSpace(v)) == "false"
	}
	return false
}

// vocab returns the model's constraint table, built on first use.
func (m *Model) vocab() (*constrain.Vocab, error) {
	m.vocabOnce.Do(func() { m.vocabTab, m.vocabErr = constrain.NewVocab(m.eng.Tokenizer) })
	return m.vocabTab, m.vocabErr
}

// grammar builds the constraint a prepared chat or completion request
// needs, or nil when it needs none (a request for any JSON object with no
// reasoning before it takes jsonmode.go's constraint instead). tools are
// the tools the prompt offers.
//
// A chat reply of a model that reasons between markers may reason first:
// the JSON value or the forced calls begin after the end marker. The
// constraint holds from the first token when thinking is off or the
// template closed reasoning in the prompt; a reasoning budget forces the
// end marker and hands over to the body.
func (m *Model) grammar(req *Request, p *Prepared, tools []json.RawMessage) (*constrain.Grammar, error) {
	var spec constrain.Spec
	need := false
	if ch := m.channels(req); ch != nil {
		spec, need = channelSpec(req, tools, ch, m.format.Tools.Forced())
	} else {
		chatReq := len(req.Messages) > 0
		f := m.format
		if start, end := f.ReasoningMarkers(); end != "" && chatReq {
			spec.ThinkStart, spec.ThinkEnd = start, end
			spec.InReasoning = p.inReasoning
		}
		var fc chat.ForcedCalls
		known := f.Tools != nil
		if known {
			fc = f.Tools.Forced()
		}
		switch {
		case req.Schema != nil || req.JSON:
			spec.Schema, need = req.Schema, true
			if spec.Schema == nil {
				spec.Schema = anyObject()
			}
		case !chatReq:
		case req.ToolChoice.Mode == ToolRequired || req.ToolChoice.Mode == ToolNamed:
			if known && len(tools) > 0 {
				tc := &constrain.ToolCalls{Syntax: constrain.CallSyntax(fc.Syntax), Multiple: fc.Multiple && req.ToolChoice.Mode == ToolRequired}
				for _, t := range tools {
					name, params := toolSignature(t)
					tc.Tools = append(tc.Tools, constrain.Tool{Name: name, Params: constrain.CompileToolSchema(params)})
				}
				spec.Tools, need = tc, true
			}
		case req.ToolChoice.Mode == ToolNone:
			if known && fc.Marker != "" && len(req.Tools) > 0 {
				spec.Forbid, need = fc.Marker, true
			}
		}
		if spec.ThinkEnd != "" {
			closed := strings.HasSuffix(strings.TrimRight(p.text, " \t\r\n"), spec.ThinkEnd)
			switch {
			case closed:
				// The template closed reasoning itself.
				spec.ThinkStart, spec.ThinkEnd, spec.InReasoning = "", "", false
			case thinkingOff(req.Kwargs) && spec.Schema != nil && !spec.InReasoning:
				// The value begins at once: no room for reasoning.
				spec.ThinkStart, spec.ThinkEnd = "", ""
			case thinkingOff(req.Kwargs):
				spec.NoThinking, need = true, true
			case req.ThinkingBudget > 0:
				spec.ThinkBudget, need = req.ThinkingBudget, true
			}
		}
		if req.JSON && spec.ThinkEnd == "" {
			return nil, nil // the JSON object constraint of jsonmode.go
		}
		p.reasonFirst = spec.Schema != nil && spec.ThinkEnd != ""
	}
	if !need {
		return nil, nil
	}
	v, err := m.vocab()
	if err != nil {
		return nil, err
	}
	return v.Compile(spec)
}

// channels returns the channels of the model's output format where req is
// a chat request and the format has them (chat.Channels), or nil: then
// channelSpec builds the request's constraint, and the output parser
// reads its JSON out of the answer's channel.
func (m *Model) channels(req *Request) *chat.Channels {
	if len(req.Messages) == 0 {
		return nil
	}
	return m.format.Channels()
}

// channelSpec returns the constraint a chat request to a model whose
// format has channels needs, and whether it needs one. A JSON value (a
// schema, or any object) goes in the answer's channel and a required or
// named call in the format's call syntax, either after reasoning unless
// thinking is off; under tool_choice none no call is written; a reasoning
// budget bounds the reasoning channel. (Thinking off leaves free text
// free: the reasoning channel cannot be kept out of it.)
func channelSpec(req *Request, tools []json.RawMessage, ch *chat.Channels, fc chat.ForcedCalls) (constrain.Spec, bool) {
	var spec constrain.Spec
	think := !thinkingOff(req.Kwargs)
	switch {
	case req.Schema != nil || req.JSON:
		spec.Schema, spec.Prefix = req.Schema, ch.Answer
		if spec.Schema == nil {
			spec.Schema = anyObject()
		}
	case (req.ToolChoice.Mode == ToolRequired || req.ToolChoice.Mode == ToolNamed) && len(tools) > 0:
		tc := &constrain.ToolCalls{Syntax: constrain.CallSyntax(fc.Syntax), Multiple: fc.Multiple && req.ToolChoice.Mode == ToolRequired}
		for _, t := range tools {
			name, params := toolSignature(t)
			if !chat.ValidToolName(name) {
				// Not a name a message header can carry: the parser
				// would not read the call back.
				continue
			}
			tc.Tools = append(tc.Tools, constrain.Tool{Name: name, Params: constrain.CompileToolSchema(params)})
		}
		if len(tc.Tools) == 0 {
			return spec, false
		}
		spec.Tools = tc
	case req.ToolChoice.Mode == ToolNone && len(req.Tools) > 0:
		spec.Forbid = fc.Marker
		think = req.ThinkingBudget > 0
	case req.ThinkingBudget > 0:
	default:
		return spec, false
	}
	if think {
		spec.ThinkStart, spec.ThinkEnd, spec.ThinkEndCommit = ch.Reasoning, ch.Next, ch.NextCommit
		spec.ThinkBudget = req.ThinkingBudget
	}
	return spec, true
}

// toolSignature returns a tool definition's function name and parameters.
func toolSignature(raw json.RawMessage) (string, json.RawMessage) {
	var t struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	json.Unmarshal(raw, &t)
	return t.Function.Name, t.Function.Parameters
}

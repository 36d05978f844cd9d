package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"lem/chat"
	"lem/constrain"
)

// This file turns a request's demands on the output into a grammar
// constraint (package constrain): a JSON schema, tool_choice required or a
// named function (a call in the model family's syntax, arguments held to
// the tool's parameters), tool_choice none (the family's call marker kept
// out), a reasoning budget, and thinking turned off.

// callSyntaxes are the tool-call syntaxes a constraint can hold output to,
// by the model's tool format, as the output parser reads them.
var callSyntaxes = map[chat.ToolFormat]struct {
	syntax   constrain.CallSyntax
	multiple bool   // several calls may follow each other
	marker   string // the text that opens calls, kept out under tool_choice none
}{
	chat.ToolsHermes:  {constrain.CallSyntax{Call: "<tool_call>\n{\"name\": \"", Mid: "\", \"arguments\": ", Suffix: "}\n</tool_call>"}, true, "<tool_call>"},
	chat.ToolsMistral: {constrain.CallSyntax{Open: "[TOOL_CALLS][", Call: "{\"name\": \"", Mid: "\", \"arguments\": ", Suffix: "}", Sep: ", ", Close: "]"}, true, "[TOOL_CALLS]"},
	chat.ToolsLlama3:  {constrain.CallSyntax{Call: "{\"name\": \"", Mid: "\", \"parameters\": ", Suffix: "}"}, false, "<|python_tag|>"},
	chat.ToolsGemma:   {constrain.CallSyntax{Call: "{\"name\": \"", Mid: "\", \"parameters\": ", Suffix: "}"}, false, ""},
	// The stop token <|call|> ends a Harmony call; one call ends the turn.
	chat.ToolsHarmony: {constrain.CallSyntax{Call: "<|channel|>commentary to=" + harmonyFunctions, Mid: " <|constrain|>json<|message|>"}, false, "to=" + harmonyFunctions},
}

// The Harmony format (gpt-oss) as constraints hold output to it. Its
// reasoning is the analysis channel, which the end of the message and the
// header of the next one close; its answer is the final channel; a call
// goes in the commentary channel, to a recipient in the functions
// namespace. The generation prompt ends with "<|start|>assistant", so
// output begins with "<|channel|>".
const (
	harmonyAnalysis  = "<|channel|>analysis<|message|>"
	harmonyNext      = "<|end|><|start|>assistant"
	harmonyFinal     = "<|channel|>final<|message|>"
	harmonyFunctions = "functions."
)

// anyObject is the schema of response_format json_object where a grammar
// holds the output (Harmony models, whose JSON goes in the final channel).
var anyObject = sync.OnceValue(func() *constrain.Schema {
	s, err := constrain.CompileSchema([]byte(`{"type": "object"}`))
	if err != nil {
		panic(err)
	}
	return s
})

// compileSchema compiles a request's JSON schema (response_format
// json_schema and the like), naming param in errors.
func compileSchema(raw json.RawMessage, param string) (*constrain.Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, invalid(param, "is required")
	}
	s, err := constrain.CompileSchema(raw)
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
// needs, or nil when it needs none. tools are the tools the prompt offers.
func (m *Model) grammar(req *Request, p *Prepared, tools []json.RawMessage) (*constrain.Grammar, error) {
	harmony := m.harmonyChat(req)
	if req.JSON && !harmony {
		return nil, nil // the JSON object constraint of jsonmode.go
	}
	var spec constrain.Spec
	need := false
	if harmony {
		spec, need = harmonySpec(req, tools)
	} else if req.Schema != nil {
		spec.Schema, need = req.Schema, true
	} else if len(req.Messages) > 0 {
		f := m.format
		if f.Tools != chat.ToolsHarmony && f.ThinkEnd != "" {
			spec.ThinkStart, spec.ThinkEnd = f.ThinkStart, f.ThinkEnd
			spec.InReasoning = p.inReasoning
		}
		cs, known := callSyntaxes[f.Tools]
		switch req.ToolChoice.Mode {
		case ToolRequired, ToolNamed:
			if known && len(tools) > 0 {
				tc := &constrain.ToolCalls{Syntax: cs.syntax, Multiple: cs.multiple && req.ToolChoice.Mode == ToolRequired}
				for _, t := range tools {
					name, params := toolSignature(t)
					tc.Tools = append(tc.Tools, constrain.Tool{Name: name, Params: constrain.CompileToolSchema(params)})
				}
				spec.Tools, need = tc, true
			}
		case ToolNone:
			if known && cs.marker != "" && len(req.Tools) > 0 {
				spec.Forbid, need = cs.marker, true
			}
		}
		if spec.ThinkEnd != "" {
			switch {
			case thinkingOff(req.Kwargs):
				if strings.HasSuffix(strings.TrimRight(p.text, " \t\r\n"), spec.ThinkEnd) {
					// The template closed reasoning itself.
					spec.ThinkStart, spec.ThinkEnd, spec.InReasoning = "", "", false
				} else {
					spec.NoThinking, need = true, true
				}
			case req.ThinkingBudget > 0:
				spec.ThinkBudget, need = req.ThinkingBudget, true
			}
		}
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

// harmonyChat reports whether req is a chat request to a model in the
// Harmony format, whose constraints harmonySpec builds.
func (m *Model) harmonyChat(req *Request) bool {
	return len(req.Messages) > 0 && m.format.Tools == chat.ToolsHarmony
}

// harmonySpec returns the constraint a chat request to a Harmony model
// needs, and whether it needs one. A JSON value (a schema, or any object)
// goes in the final channel and a required or named call in the
// commentary channel, either after analysis unless thinking is off; under
// tool_choice none no message goes to a function; a reasoning budget
// bounds the analysis. (Thinking off leaves free text free: the analysis
// channel cannot be kept out of it.)
func harmonySpec(req *Request, tools []json.RawMessage) (constrain.Spec, bool) {
	var spec constrain.Spec
	think := !thinkingOff(req.Kwargs)
	switch {
	case req.Schema != nil || req.JSON:
		spec.Schema, spec.Prefix = req.Schema, harmonyFinal
		if spec.Schema == nil {
			spec.Schema = anyObject()
		}
	case (req.ToolChoice.Mode == ToolRequired || req.ToolChoice.Mode == ToolNamed) && len(tools) > 0:
		cs := callSyntaxes[chat.ToolsHarmony]
		tc := &constrain.ToolCalls{Syntax: cs.syntax}
		for _, t := range tools {
			name, params := toolSignature(t)
			if !chat.ValidToolName(name) {
				// Not a name a header can carry: the parser would not
				// read the call back.
				continue
			}
			tc.Tools = append(tc.Tools, constrain.Tool{Name: name, Params: constrain.CompileToolSchema(params)})
		}
		if len(tc.Tools) == 0 {
			return spec, false
		}
		spec.Tools = tc
	case req.ToolChoice.Mode == ToolNone && len(req.Tools) > 0:
		spec.Forbid = callSyntaxes[chat.ToolsHarmony].marker
		think = req.ThinkingBudget > 0
	case req.ThinkingBudget > 0:
	default:
		return spec, false
	}
	if think {
		spec.ThinkStart, spec.ThinkEnd, spec.ThinkEndCommit = harmonyAnalysis, harmonyNext, len("<|")
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

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

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
}

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
	if req.JSON {
		return nil, nil // the JSON object constraint of jsonmode.go
	}
	var spec constrain.Spec
	need := false
	if req.Schema != nil {
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

package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// parsed is what a whole output parses into.
type parsed struct {
	Reasoning string
	Content   string
	Calls     []string // "name args", args compacted
}

func (p parsed) String() string {
	return fmt.Sprintf("reasoning=%q content=%q calls=%q", p.Reasoning, p.Content, p.Calls)
}

func (p parsed) equal(q parsed) bool {
	if p.Reasoning != q.Reasoning || p.Content != q.Content || len(p.Calls) != len(q.Calls) {
		return false
	}
	for i := range p.Calls {
		if p.Calls[i] != q.Calls[i] {
			return false
		}
	}
	return true
}

// gather folds events into a parsed value, checking each event's shape.
func gather(t testing.TB, evs []OutputEvent, into *parsed) {
	t.Helper()
	for _, e := range evs {
		switch e.Kind {
		case OutputContent:
			if e.Text == "" || e.Call != nil {
				t.Errorf("bad content event %+v", e)
			}
			into.Content += e.Text
		case OutputReasoning:
			if e.Text == "" || e.Call != nil {
				t.Errorf("bad reasoning event %+v", e)
			}
			into.Reasoning += e.Text
		case OutputToolCall:
			if e.Call == nil {
				t.Fatalf("tool-call event without a call")
			}
			var buf bytes.Buffer
			if err := json.Compact(&buf, e.Call.Arguments); err != nil || !bytes.HasPrefix(buf.Bytes(), []byte("{")) {
				t.Errorf("call %q: arguments %q are not a JSON object", e.Call.Name, e.Call.Arguments)
			}
			into.Calls = append(into.Calls, e.Call.Name+" "+buf.String())
		default:
			t.Errorf("unknown event kind %v", e.Kind)
		}
	}
}

// parseChunks feeds text cut at the given offsets.
func parseChunks(t testing.TB, f OutputFormat, inReasoning, tools bool, text string, cuts []int) parsed {
	t.Helper()
	p := f.NewParser(inReasoning, tools)
	var got parsed
	prev := 0
	for _, c := range cuts {
		gather(t, p.Feed(text[prev:c]), &got)
		prev = c
	}
	gather(t, p.Feed(text[prev:]), &got)
	gather(t, p.Finish(), &got)
	if evs := p.Finish(); len(evs) != 0 {
		t.Errorf("second Finish returned %v", evs)
	}
	if evs := p.Feed("more"); len(evs) != 0 {
		t.Errorf("Feed after Finish returned %v", evs)
	}
	return got
}

// checkAllFeeds parses text whole, one byte at a time and in random
// chunks, and checks each against want.
func checkAllFeeds(t *testing.T, f OutputFormat, inReasoning, tools bool, text string, want parsed) {
	t.Helper()
	whole := parseChunks(t, f, inReasoning, tools, text, nil)
	if !whole.equal(want) {
		t.Errorf("whole:\n got %v\nwant %v", whole, want)
	}
	bytewise := make([]int, 0, len(text))
	for i := 1; i < len(text); i++ {
		bytewise = append(bytewise, i)
	}
	if got := parseChunks(t, f, inReasoning, tools, text, bytewise); !got.equal(want) {
		t.Errorf("byte by byte:\n got %v\nwant %v", got, want)
	}
	rng := rand.New(rand.NewPCG(uint64(len(text)), 7))
	for range 20 {
		var cuts []int
		for i := 0; i < len(text); {
			i += 1 + rng.IntN(8)
			if i < len(text) {
				cuts = append(cuts, i)
			}
		}
		if got := parseChunks(t, f, inReasoning, tools, text, cuts); !got.equal(want) {
			t.Errorf("chunks %v:\n got %v\nwant %v", cuts, got, want)
			break
		}
	}
}

// TestOutputChatModel splits the greedy replies of the trained chat model
// (Qwen 3's template and formats) into reasoning, content and tool calls.
func TestOutputChatModel(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	set, err := LoadDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := DetectOutputFormat(set.Default())
	if want := (OutputFormat{ThinkStart: "<think>", ThinkEnd: "</think>", Tools: ToolsHermes}); f != want {
		t.Fatalf("DetectOutputFormat = %+v, want %+v", f, want)
	}
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			Prompt     string            `json:"prompt"`
			Tools      []json.RawMessage `json:"tools"`
			GreedyText string            `json:"greedy_text"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	// What the replies say, by the start of their greedy text.
	answers := map[string]parsed{
		"The capital of Japan": {Content: "The capital of Japan is Tokyo."},
		"12 + 30":              {Content: "12 + 30 = 42."},
		"nedrag":               {Content: "nedrag"},
		"Hello!":               {Content: "Hello! How can I help you today?"},
		"It is 21":             {Content: "It is 21°C in Paris."},
		"<tool_call>":          {Calls: []string{`get_weather {"city":"Paris"}`}},
	}
	reasons := []string{
		"The user asks for the capital of Japan. It is Tokyo.",
		"I add 12 and 30. The sum is 42.",
		"The word is garden. Backwards it is nedrag.",
		"The user greets me. I greet them back.",
		"The user wants the weather in Paris. I call get_weather.",
		"The tool says 21 degrees in Paris.",
	}
	thinking := 0
	for i, c := range ref.Cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			// The engine stops on <|im_end|> without emitting it.
			text, ok := strings.CutSuffix(c.GreedyText, "<|im_end|>")
			if !ok {
				t.Fatalf("greedy text %q does not end with <|im_end|>", c.GreedyText)
			}
			var want parsed
			reply := text
			if r, ok := strings.CutPrefix(text, "<think>\n"); ok {
				reasoning, rest, ok := strings.Cut(r, "\n</think>\n\n")
				if !ok {
					t.Fatalf("unterminated reasoning in %q", text)
				}
				want.Reasoning, reply = reasoning, rest
				if !containsString(reasons, reasoning) {
					t.Errorf("reasoning %q is not one of the known ones", reasoning)
				}
				thinking++
			}
			found := false
			for prefix, a := range answers {
				if strings.HasPrefix(reply, prefix) {
					want.Content, want.Calls, found = a.Content, a.Calls, true
				}
			}
			if !found {
				t.Fatalf("no known answer for %q", reply)
			}
			tools := len(c.Tools) > 0
			if want.Calls != nil && !tools {
				t.Fatalf("tool call without tools")
			}
			in := f.InReasoning(c.Prompt)
			if in {
				t.Errorf("InReasoning(%q) = true", c.Prompt)
			}
			checkAllFeeds(t, f, in, tools, text, want)
			if tools {
				// Without tools on offer, a call is content.
				plain := parsed{Reasoning: want.Reasoning, Content: reply}
				checkAllFeeds(t, f, in, false, text, plain)
			}
			// A prompt that opened <think> itself.
			if want.Reasoning != "" {
				checkAllFeeds(t, f, true, tools, strings.TrimPrefix(text, "<think>"), want)
			}
		})
	}
	if thinking == 0 {
		t.Error("no thinking case in the fixture")
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var (
	qwen3   = OutputFormat{ThinkStart: "<think>", ThinkEnd: "</think>", Tools: ToolsHermes}
	llama3  = OutputFormat{Tools: ToolsLlama3}
	mistral = OutputFormat{ThinkStart: "[THINK]", ThinkEnd: "[/THINK]", Tools: ToolsMistral}
	gemma   = OutputFormat{Tools: ToolsGemma}
	harmony = OutputFormat{Tools: ToolsHarmony}
)

func TestOutputParser(t *testing.T) {
	tests := []struct {
		name        string
		f           OutputFormat
		inReasoning bool
		tools       bool
		text        string
		want        parsed
	}{
		// Reasoning.
		{"plain", qwen3, false, false, "Hello there.", parsed{Content: "Hello there."}},
		{"no format", OutputFormat{}, false, true, "<think>x</think><tool_call>", parsed{Content: "<think>x</think><tool_call>"}},
		{"think", qwen3, false, false, "<think>\nHmm.\n</think>\n\nHi.", parsed{Reasoning: "Hmm.", Content: "Hi."}},
		{"think leading space", qwen3, false, false, "\n <think>a\n\nb </think>c", parsed{Reasoning: "a\n\nb", Content: "c"}},
		{"think empty", qwen3, false, false, "<think>\n\n</think>\n\nHi.", parsed{Content: "Hi."}},
		{"think unterminated", qwen3, false, false, "<think>\nstill thinking\n", parsed{Reasoning: "still thinking"}},
		{"think prefix only", qwen3, false, false, "<thi", parsed{Content: "<thi"}},
		{"not think", qwen3, false, false, "<thing> is </think>", parsed{Content: "<thing> is </think>"}},
		{"think later is text", qwen3, false, false, "a <think>b</think>", parsed{Content: "a <think>b</think>"}},
		{"in reasoning", qwen3, true, false, "\nplan\n</think>\n\nanswer\n", parsed{Reasoning: "plan", Content: "answer\n"}},
		{"in reasoning no end", qwen3, true, false, "plan", parsed{Reasoning: "plan"}},
		{"end marker split ok", qwen3, true, false, "a</thin b</think>c", parsed{Reasoning: "a</thin b", Content: "c"}},
		{"whitespace only", qwen3, false, false, "\n\n", parsed{Content: "\n\n"}},
		{"utf8", qwen3, false, false, "<think>é€😀</think>ü😀", parsed{Reasoning: "é€😀", Content: "ü😀"}},

		// Hermes.
		{"hermes call", qwen3, false, true, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": [2]}}\n</tool_call>",
			parsed{Calls: []string{`f {"b":1,"a":[2]}`}}},
		{"hermes text before", qwen3, false, true, "Let me check.\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
			parsed{Content: "Let me check.", Calls: []string{"f {}"}}},
		{"hermes two calls", qwen3, false, true, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"y\": \"</\"}}\n</tool_call>\n",
			parsed{Calls: []string{`f {"x":1}`, `g {"y":"</"}`}}},
		{"hermes text after", qwen3, false, true, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\nDone.",
			parsed{Content: "Done.", Calls: []string{"f {}"}}},
		{"hermes after reasoning", qwen3, false, true, "<think>\nI call f.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"é\"}}\n</tool_call>",
			parsed{Reasoning: "I call f.", Calls: []string{`f {"q":"é"}`}}},
		{"hermes string arguments", qwen3, false, true, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
			parsed{Calls: []string{`f {"a":1}`}}},
		{"hermes parameters key", qwen3, false, true, "<tool_call>{\"name\": \"f\", \"parameters\": {\"a\": 1}}</tool_call>",
			parsed{Calls: []string{`f {"a":1}`}}},
		{"hermes openai shape", qwen3, false, true, "<tool_call>{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}</tool_call>",
			parsed{Calls: []string{`f {"a":1}`}}},
		{"hermes bad json", qwen3, false, true, "Hi\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>",
			parsed{Content: "Hi\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>"}},
		{"hermes args not object", qwen3, false, true, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
			parsed{Content: "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>"}},
		{"hermes unterminated", qwen3, false, true, "ok <tool_call>\n{\"name\": \"f\", \"arguments\": {}}",
			parsed{Content: "ok <tool_call>\n{\"name\": \"f\", \"arguments\": {}}"}},
		{"hermes bad then good", qwen3, false, true, "<tool_call>oops!</tool_call><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
			parsed{Content: "<tool_call>oops!</tool_call>", Calls: []string{"f {}"}}},
		{"hermes not offered", qwen3, false, false, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
			parsed{Content: "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"}},
		{"hermes partial marker text", qwen3, false, true, "a <tool_ b", parsed{Content: "a <tool_ b"}},
		{"hermes function tags", qwen3, true, true, "Plan.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"u\": \"c\"}\n</parameter>\n</function>\n</tool_call>",
			parsed{Reasoning: "Plan.", Calls: []string{`get_weather {"city":"Paris","days":3,"opts":{"u":"c"}}`}}},
		{"hermes function tags multiline", qwen3, false, true, "<tool_call>\n<function=w>\n<parameter=text>\nline 1\nline 2\n</parameter>\n</function>\n</tool_call>",
			parsed{Calls: []string{`w {"text":"line 1\nline 2"}`}}},
		{"hermes glm", qwen3, false, true, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>n</arg_key><arg_value>2</arg_value>\n</tool_call>",
			parsed{Calls: []string{`get_weather {"city":"Paris","n":2}`}}},
		{"hermes glm no args", qwen3, false, true, "<tool_call>now</tool_call>", parsed{Calls: []string{"now {}"}}},

		// Llama 3.
		{"llama3 call", llama3, false, true, `{"name": "get_weather", "parameters": {"city": "Paris"}}`,
			parsed{Calls: []string{`get_weather {"city":"Paris"}`}}},
		{"llama3 python tag", llama3, false, true, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}",
			parsed{Calls: []string{"f {}"}}},
		{"llama3 two calls", llama3, false, true, "\n{\"name\": \"f\", \"parameters\": {\"a\": 1}}; {\"name\": \"g\", \"parameters\": {}}",
			parsed{Calls: []string{`f {"a":1}`, "g {}"}}},
		{"llama3 not a call", llama3, false, true, `{"answer": 42}`, parsed{Content: `{"answer": 42}`}},
		{"llama3 brace prose", llama3, false, true, "{ is a brace", parsed{Content: "{ is a brace"}},
		{"llama3 unterminated", llama3, false, true, `{"name": "f", "parameters": {`, parsed{Content: `{"name": "f", "parameters": {`}},
		{"llama3 text", llama3, false, true, `Sure: {"name": "f", "parameters": {}}`, parsed{Content: `Sure: {"name": "f", "parameters": {}}`}},
		{"llama3 call then text", llama3, false, true, "{\"name\": \"f\", \"parameters\": {}}\nDone.", parsed{Content: "Done.", Calls: []string{"f {}"}}},
		{"llama3 not offered", llama3, false, false, `{"name": "f", "parameters": {}}`, parsed{Content: `{"name": "f", "parameters": {}}`}},
		{"llama3 python code", llama3, false, true, "<|python_tag|>print(1)", parsed{Content: "<|python_tag|>print(1)"}},
		{"llama3 bad bracket", llama3, false, true, `{"name": "f", "parameters": {]} tail`, parsed{Content: `{"name": "f", "parameters": {]} tail`}},

		// Mistral.
		{"mistral array", mistral, false, true, `[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]`,
			parsed{Calls: []string{`f {"a":1}`, "g {}"}}},
		{"mistral args form", mistral, false, true, `[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}`,
			parsed{Calls: []string{`get_weather {"city":"Paris"}`, `add {"a":1,"b":2}`}}},
		{"mistral call id", mistral, false, true, `[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{"x": "y"}`,
			parsed{Calls: []string{`f {"x":"y"}`}}},
		{"mistral text before", mistral, false, true, "Checking.\n[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
			parsed{Content: "Checking.", Calls: []string{"f {}"}}},
		{"mistral think", mistral, false, true, "[THINK]Use f.[/THINK]\n[TOOL_CALLS]f[ARGS]{}",
			parsed{Reasoning: "Use f.", Calls: []string{"f {}"}}},
		{"mistral bad args", mistral, false, true, `[TOOL_CALLS]f[ARGS]{"a": tru}`, parsed{Content: `[TOOL_CALLS]f[ARGS]{"a": tru}`}},
		{"mistral bad name", mistral, false, true, `[TOOL_CALLS]two words[ARGS]{}`, parsed{Content: `[TOOL_CALLS]two words[ARGS]{}`}},
		{"mistral unterminated", mistral, false, true, `[TOOL_CALLS][{"name": "f"`, parsed{Content: `[TOOL_CALLS][{"name": "f"`}},
		{"mistral not offered", mistral, false, false, `[TOOL_CALLS]f[ARGS]{}`, parsed{Content: `[TOOL_CALLS]f[ARGS]{}`}},

		// Gemma.
		{"gemma tool_code python", gemma, false, true, "```tool_code\nget_weather(city=\"Paris\", days=3, metric=True)\n```",
			parsed{Calls: []string{`get_weather {"city":"Paris","days":3,"metric":true}`}}},
		{"gemma tool_code print", gemma, false, true, "```tool_code\nprint(f(x='a\\'b', y=[1, 2.5, None], z={'k': (1,)}))\n```",
			parsed{Calls: []string{`f {"x":"a'b","y":[1,2.5,null],"z":{"k":[1]}}`}}},
		{"gemma tool_code json", gemma, false, true, "```tool_code\n{\"name\": \"f\", \"parameters\": {\"a\": 1}}\n```",
			parsed{Calls: []string{`f {"a":1}`}}},
		{"gemma json fence", gemma, false, true, "```json\n[{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"parameters\": {\"b\": 2}}]\n```",
			parsed{Calls: []string{"f {}", `g {"b":2}`}}},
		{"gemma json fence not call", gemma, false, true, "```json\n{\"a\": 1}\n```", parsed{Content: "```json\n{\"a\": 1}\n```"}},
		{"gemma unfenced", gemma, false, true, `{"name": "f", "parameters": {"a": 1}}`, parsed{Calls: []string{`f {"a":1}`}}},
		{"gemma python list", gemma, false, true, `[f(a=1), g(b="x")]`, parsed{Calls: []string{`f {"a":1}`, `g {"b":"x"}`}}},
		{"gemma python lines", gemma, false, true, "```tool_code\nf(a=1)\ng()\n```", parsed{Calls: []string{`f {"a":1}`, "g {}"}}},
		{"gemma list prose", gemma, false, true, "[1] Ref.", parsed{Content: "[1] Ref."}},
		{"gemma other fence", gemma, false, true, "```python\nx = 1\n```", parsed{Content: "```python\nx = 1\n```"}},
		{"gemma positional", gemma, false, true, "```tool_code\nf(1)\n```", parsed{Content: "```tool_code\nf(1)\n```"}},
		{"gemma text", gemma, false, true, "The answer is 4.", parsed{Content: "The answer is 4."}},

		// Harmony.
		{"harmony final", harmony, false, false, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Answer.",
			parsed{Reasoning: "Think.", Content: "Answer."}},
		{"harmony return", harmony, false, false, "<|channel|>final<|message|>Answer.<|return|>", parsed{Content: "Answer."}},
		{"harmony call", harmony, false, true, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
			parsed{Reasoning: "Need weather.", Calls: []string{`get_weather {"city":"Paris"}`}}},
		{"harmony call marker", harmony, false, true, " to=functions.f<|channel|>commentary json<|message|>{\"a\": 1}<|call|>",
			parsed{Calls: []string{`f {"a":1}`}}},
		{"harmony preamble", harmony, false, true, "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>",
			parsed{Content: "Checking.", Calls: []string{"f {}"}}},
		{"harmony bad args", harmony, false, true, "<|channel|>commentary to=functions.f <|message|>{oops",
			parsed{Content: "{oops"}},
		{"harmony analysis code", harmony, false, true, "<|channel|>analysis to=python code<|message|>print(1)<|call|>",
			parsed{Reasoning: "print(1)"}},
		{"harmony not offered", harmony, false, false, "<|channel|>commentary to=functions.f <|message|>{\"a\": 1}<|call|>",
			parsed{Content: "{\"a\": 1}"}},
		{"harmony in reasoning", harmony, true, false, "Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi",
			parsed{Reasoning: "Think.", Content: "Hi"}},
		{"harmony no markers", harmony, false, false, "Just text without any channel markers at all, long enough to decide.",
			parsed{Content: "Just text without any channel markers at all, long enough to decide."}},
		{"harmony short text", harmony, false, false, "Hi", parsed{Content: "Hi"}},
		{"harmony cut header", harmony, false, false, "<|channel|>final<|message|>Hi<|end|><|start|>assistant<|chan",
			parsed{Content: "Hi"}},
		{"harmony skipped end", harmony, false, false, "<|channel|>analysis<|message|>a<|channel|>final<|message|>b",
			parsed{Reasoning: "a", Content: "b"}},
		{"harmony real call", harmony, false, true, "<|channel|>analysis<|message|>The user wants the weather in Paris. Call get_weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"Paris, France\",\"unit\":\"celsius\"}<|call|>",
			parsed{Reasoning: "The user wants the weather in Paris. Call get_weather.", Calls: []string{`get_weather {"location":"Paris, France","unit":"celsius"}`}}},
		{"harmony call then answer", harmony, false, true, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|><|start|>assistant<|channel|>final<|message|>Done.<|return|>",
			parsed{Content: "Done.", Calls: []string{"f {}"}}},
		{"harmony two calls", harmony, false, true, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": [1, {\"y\": \"}\"}]}<|call|><|start|>assistant to=functions.g<|channel|>commentary json<|message|>{ }<|call|>",
			parsed{Calls: []string{`f {"x":[1,{"y":"}"}]}`, "g {}"}}},
		// A marker ends a message wherever it is: the call's text is
		// content, and so is what follows the marker, up to the next.
		{"harmony marker in arguments", harmony, false, true, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"y\": \"<|end|>\"}<|call|>",
			parsed{Content: `{"y": ""}`}},
		{"harmony string arguments", harmony, false, true, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>\"{\\\"a\\\": 1}\"<|call|>",
			parsed{Calls: []string{`f {"a":1}`}}},
		{"harmony arguments not object", harmony, false, true, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>[1, 2]<|call|>",
			parsed{Content: "[1, 2]"}},
		{"harmony call cut short", harmony, false, true, "<|channel|>analysis<|message|>Go.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": ",
			parsed{Reasoning: "Go.", Content: `{"a":`}},
		{"harmony builtin recipient", harmony, false, true, "<|channel|>analysis to=python code<|message|>{\"a\": 1}<|call|>",
			parsed{Reasoning: `{"a": 1}`}},
		{"harmony empty function name", harmony, false, true, "<|channel|>commentary to=functions. <|constrain|>json<|message|>{}<|call|>",
			parsed{Content: "{}"}},
		{"harmony bad function name", harmony, false, true, "<|channel|>commentary to=functions.f(x) <|constrain|>json<|message|>{}<|call|>",
			parsed{Content: "{}"}},
		{"harmony analysis cut short", harmony, false, false, "<|channel|>analysis<|message|>Still thinking about it",
			parsed{Reasoning: "Still thinking about it"}},
		{"harmony white space", harmony, false, false, "\n<|channel|>analysis<|message|>\n a \n<|end|>\n<|start|>assistant<|channel|>final<|message|>\n\nHi\n<|return|>",
			parsed{Reasoning: "a", Content: "Hi"}},
		{"harmony utf8", harmony, false, false, "<|channel|>analysis<|message|>é€😀<|end|><|start|>assistant<|channel|>final<|message|>ü😀",
			parsed{Reasoning: "é€😀", Content: "ü😀"}},
		{"harmony recipient in text", harmony, false, true, "<|channel|>final<|message|>Send it to=functions.f {} now.",
			parsed{Content: "Send it to=functions.f {} now."}},
		{"harmony text then end", harmony, false, false, "Hello<|end|>", parsed{Content: "Hello"}},
		{"harmony text before header", harmony, false, false, "Sure.<|start|>assistant<|channel|>final<|message|>Hi",
			parsed{Content: "Sure.Hi"}},
		{"harmony end in header", harmony, false, false, "<|channel|>final<|end|>ok", parsed{Content: "<|channel|>finalok"}},
		{"harmony long header", harmony, false, false, "<|channel|>final " + strings.Repeat("x", 400) + "<|message|>Hi",
			parsed{Content: "<|channel|>final " + strings.Repeat("x", 400) + "<|message|>Hi"}},
		{"harmony runaway header", harmony, false, false, "<|channel|>final " + strings.Repeat("y", 400),
			parsed{Content: "<|channel|>final " + strings.Repeat("y", 400)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkAllFeeds(t, tc.f, tc.inReasoning, tc.tools, tc.text, tc.want)
		})
	}
}

// TestOutputParserStreams checks that text is released as soon as it
// cannot start a marker, and held while it can.
func TestOutputParserStreams(t *testing.T) {
	steps := []feedStep{
		{"<thi", ""},
		{"nk>\n", ""},
		{"Let me", "reasoning:Let me"},
		{" see.\n", "reasoning: see."},
		{"</thi", ""},
		{"nk>\n\n", ""},
		{"Sure", "content:Sure"},
		{", <", "content:,"},
		{"b>", "content: <b>"},
		{" <tool", ""},
		{"_call>\n{\"name\": \"f\", ", ""},
		{"\"arguments\": {}}\n</tool_call>", "tool_call:f"},
		{"\nBye", "content:Bye"},
	}
	checkSteps(t, qwen3.NewParser(false, true), steps)
}

// feedStep is one delta fed to a parser and the events it must release,
// written as kind:text (tool_call:name for calls) joined by "|".
type feedStep struct{ delta, want string }

// checkSteps feeds the deltas in turn, comparing the events each releases,
// and expects nothing more from Finish.
func checkSteps(t *testing.T, p *OutputParser, steps []feedStep) {
	t.Helper()
	for i, s := range steps {
		var got []string
		for _, e := range p.Feed(s.delta) {
			if e.Kind == OutputToolCall {
				got = append(got, "tool_call:"+e.Call.Name)
			} else {
				got = append(got, e.Kind.String()+":"+e.Text)
			}
		}
		if g := strings.Join(got, "|"); g != s.want {
			t.Errorf("step %d: Feed(%q) = %q, want %q", i, s.delta, g, s.want)
		}
	}
	if evs := p.Finish(); len(evs) != 0 {
		t.Errorf("Finish = %v, want nothing", evs)
	}
}

func TestDetectOutputFormat(t *testing.T) {
	think := func(f OutputFormat) OutputFormat {
		f.ThinkStart, f.ThinkEnd = "<think>", "</think>"
		return f
	}
	tests := []struct {
		name string
		src  string
		want OutputFormat
	}{
		{"none", "{% for m in messages %}{{ m.content }}{% endfor %}", OutputFormat{}},
		{"hermes", `{{ '<tool_call>\n' }}`, OutputFormat{Tools: ToolsHermes}},
		{"hermes think", `<tool_call>{% if x %}<think>\n{% endif %}`, think(OutputFormat{Tools: ToolsHermes})},
		{"think only", `{{ content.split('</think>')[-1] }}`, think(OutputFormat{})},
		{"python tag", `{{ "<|python_tag|>" + tool_call.name }}`, OutputFormat{Tools: ToolsLlama3}},
		{"llama parameters", `<|start_header_id|>{{ 'Respond in the format {"name": function name, "parameters": dictionary}' }}`, OutputFormat{Tools: ToolsLlama3}},
		{"llama no tools", `<|start_header_id|>{{ m.role }}<|end_header_id|>`, OutputFormat{}},
		{"mistral", `[TOOL_CALLS]{{ name }}[ARGS]`, OutputFormat{Tools: ToolsMistral}},
		{"mistral think", `[THINK]{{ t }}[/THINK][TOOL_CALLS]`, OutputFormat{ThinkStart: "[THINK]", ThinkEnd: "[/THINK]", Tools: ToolsMistral}},
		{"gemma", `<start_of_turn>{{ role }}`, OutputFormat{Tools: ToolsGemma}},
		{"harmony", `<|start|>assistant<|channel|>final<|message|><think>`, OutputFormat{Tools: ToolsHarmony}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := Parse(tc.src, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := DetectOutputFormat(tmpl); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := DetectOutputFormat(nil); got != (OutputFormat{}) {
		t.Errorf("nil template: got %+v", got)
	}
}

// TestDetectOutputFormatFixtures detects the formats of the real templates
// in the fixtures.
func TestDetectOutputFormatFixtures(t *testing.T) {
	tests := []struct {
		dir  []string
		want OutputFormat
	}{
		{[]string{"chat-model"}, qwen3},
		{[]string{"tokenizers", "qwen3"}, qwen3},
		{[]string{"tokenizers", "gemma3"}, gemma},
		// The fixture's Llama 3 template renders no tools.
		{[]string{"tokenizers", "llama3"}, OutputFormat{}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.dir, "/"), func(t *testing.T) {
			set, err := LoadDir(fixtures.Dir(t, tc.dir...), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := DetectOutputFormat(set.Default()); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestOutputInReasoning(t *testing.T) {
	tests := []struct {
		f      OutputFormat
		prompt string
		want   bool
	}{
		{qwen3, "<|im_start|>assistant\n", false},
		{qwen3, "<|im_start|>assistant\n<think>\n", true},
		{qwen3, "<|im_start|>assistant\n<think>", true},
		{qwen3, "<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
		{OutputFormat{}, "<think>\n", false},
		{harmony, "<think>\n", false},
	}
	for _, tc := range tests {
		if got := tc.f.InReasoning(tc.prompt); got != tc.want {
			t.Errorf("%+v.InReasoning(%q) = %v, want %v", tc.f, tc.prompt, got, tc.want)
		}
	}
}

func TestOutputKindString(t *testing.T) {
	for k, want := range map[OutputKind]string{OutputContent: "content", OutputReasoning: "reasoning", OutputToolCall: "tool_call", 7: "OutputKind(7)"} {
		if got := k.String(); got != want {
			t.Errorf("%d: got %q, want %q", int(k), got, want)
		}
	}
}

// FuzzOutputParser checks that no input panics, that the events do not
// depend on how the text is split, and that calls are well formed.
func FuzzOutputParser(f *testing.F) {
	formats := []OutputFormat{qwen3, llama3, mistral, gemma, harmony, {}}
	seeds := []string{
		"<think>\na\n</think>\n\nb",
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"}\"}]}}\n</tool_call>",
		"<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
		`<|python_tag|>{"name": "f", "parameters": {}}; {"name": "g", "parameters": {"x": "'"}}`,
		`[TOOL_CALLS]f[ARGS]{"a": 1}[TOOL_CALLS][{"name": "g", "arguments": {}}]`,
		"```tool_code\nprint(f(a='x', b=[1, (2, 3)], c={'d': None}))\n```",
		"<|channel|>analysis<|message|>a<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>",
	}
	for i, s := range seeds {
		f.Add(s, uint8(i), uint64(i), true)
	}
	f.Fuzz(func(t *testing.T, text string, fi uint8, seed uint64, tools bool) {
		format := formats[int(fi)%len(formats)]
		in := seed%3 == 0
		whole := parseChunks(t, format, in, tools, text, nil)
		rng := rand.New(rand.NewPCG(seed, 1))
		var cuts []int
		for i := 0; i < len(text); {
			i += 1 + rng.IntN(4)
			if i < len(text) {
				cuts = append(cuts, i)
			}
		}
		if got := parseChunks(t, format, in, tools, text, cuts); !got.equal(whole) {
			t.Errorf("format %+v, text %q, cuts %v:\nchunks %v\nwhole  %v", format, text, cuts, got, whole)
		}
		if !tools && len(whole.Calls) > 0 {
			t.Errorf("calls without tools: %v", whole.Calls)
		}
	})
}

// BenchmarkOutputParser parses replies fed in deltas of about a token.
// concat, the baseline, only gathers the deltas; long_call is a 100 KB tool
// call, which must cost about as much per byte as ordinary text (held-back
// text is not scanned again).
func BenchmarkOutputParser(b *testing.B) {
	reply := "<think>\n" + strings.Repeat("Some reasoning about the problem. ", 50) + "\n</think>\n\n" +
		strings.Repeat("The answer, with <b>markup</b> and [links]. ", 50) +
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2, 3]}}\n</tool_call>"
	long := "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"" + strings.Repeat("a line of the file <b> [x]\\n", 4000) + "\"}}\n</tool_call>"
	deltas := func(text string) []string {
		var d []string
		for i := 0; i < len(text); i += 4 {
			d = append(d, text[i:min(i+4, len(text))])
		}
		return d
	}
	for _, tc := range []struct {
		name string
		text string
	}{{"reply", reply}, {"long_call", long}} {
		ds := deltas(tc.text)
		b.Run(tc.name+"/parse", func(b *testing.B) {
			b.SetBytes(int64(len(tc.text)))
			b.ReportAllocs()
			for b.Loop() {
				p := qwen3.NewParser(false, true)
				calls := 0
				for _, d := range ds {
					for _, e := range p.Feed(d) {
						if e.Kind == OutputToolCall {
							calls++
						}
					}
				}
				p.Finish()
				if calls != 1 {
					b.Fatalf("%d calls", calls)
				}
			}
		})
		b.Run(tc.name+"/concat", func(b *testing.B) {
			b.SetBytes(int64(len(tc.text)))
			b.ReportAllocs()
			for b.Loop() {
				var sb strings.Builder
				for _, d := range ds {
					sb.WriteString(d)
				}
				_ = sb.String()
			}
		})
	}
}

// TestParserReasoning feeds outputs a token at a time and checks, after
// each, whether the parser says it is inside reasoning.
func TestParserReasoning(t *testing.T) {
	tests := []struct {
		name        string
		f           OutputFormat
		inReasoning bool
		tokens      []string
		want        string // per token: r inside reasoning after it, - not
	}{
		{"think tags", qwen3, false, []string{"<think>", "\n", "Hmm", ".", "\n", "</think>", "\n\n", "Tokyo", "."}, "rrrrr----"},
		{"marker in pieces", qwen3, false, []string{"<th", "ink>", "a", "</th", "ink>", "b"}, "-rrr--"},
		{"prompt ends in reasoning", qwen3, true, []string{"Hmm", "</think>", "Tokyo"}, "r--"},
		{"no reasoning", qwen3, false, []string{"Tokyo", " is", "."}, "---"},
		{"mistral", mistral, false, []string{"[THINK]", "x", "[/THINK]", "y"}, "rr--"},
		{"harmony", harmony, false, []string{"<|channel|>", "analysis", "<|message|>", "Hmm", "<|end|>", "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "Tokyo", "<|return|>"}, "--rr--------"},
		{"harmony prompt ends in reasoning", harmony, true, []string{"Hmm", "<|end|>", "<|start|>"}, "r--"},
	}
	for _, tt := range tests {
		p := tt.f.NewParser(tt.inReasoning, false)
		var got strings.Builder
		for _, tok := range tt.tokens {
			p.Feed(tok)
			if p.Reasoning() {
				got.WriteByte('r')
			} else {
				got.WriteByte('-')
			}
		}
		if got.String() != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got.String(), tt.want)
		}
	}
}

package chat_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lem-engine/lem/chat"
)

func ExampleTemplate_Render() {
	const src = `
{%- for m in messages %}
    {{- '<|' + m.role + '|>\n' }}
    {%- for call in m.tool_calls %}
        {{- 'call ' + call.function.name + ' ' + (call.function.arguments | tojson) + '\n' }}
    {%- else %}
        {{- m.content + '\n' }}
    {%- endfor %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|assistant|>' }}
{%- endif %}`
	tmpl, err := chat.Parse(src, chat.Options{Name: "example"})
	if err != nil {
		fmt.Println(err)
		return
	}
	prompt, err := tmpl.Render(chat.Input{
		Messages: []chat.Message{
			{Role: "user", Content: chat.Text("Weather in Paris?")},
			{Role: "assistant", ToolCalls: []chat.ToolCall{
				{Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris","unit":"celsius"}`)},
			}},
			{Role: "tool", Content: chat.Text(`{"temp_c": 21}`), Name: "get_weather"},
		},
		AddGenerationPrompt: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(prompt)
	// Output:
	// <|user|>
	// Weather in Paris?
	// <|assistant|>
	// call get_weather {"city": "Paris", "unit": "celsius"}
	// <|tool|>
	// {"temp_c": 21}
	// <|assistant|>
}

func ExampleRaiseError() {
	tmpl, err := chat.Parse(`{%- if messages[0].role != 'user' %}
{{- raise_exception('Conversations must start with a user message') }}
{%- endif %}`, chat.Options{Name: "default"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = tmpl.Render(chat.Input{Messages: []chat.Message{{Role: "assistant", Content: chat.Text("Hi")}}})
	var raised *chat.RaiseError
	if errors.As(err, &raised) {
		fmt.Println("rejected:", raised.Message)
	}
	fmt.Println(err)
	// Output:
	// rejected: Conversations must start with a user message
	// chat template "default", line 2: Conversations must start with a user message
}

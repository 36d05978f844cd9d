// Package chat renders chat templates: the Jinja templates that models ship
// to turn a conversation (and the tools on offer) into the exact prompt text
// they were trained on. A render is meant to equal, byte for byte, what
// Hugging Face transformers' apply_chat_template produces.
//
// # Loading
//
// LoadDir reads a model directory (tokenizer_config.json's chat_template,
// as a string or as a list of named templates, chat_template.jinja,
// additional_chat_templates/) together with the special tokens the
// templates read (bos_token, eos_token, …). Parse compiles a single template
// from a string, such as a GGUF file's tokenizer.chat_template; NewSet
// compiles several. Set.Select picks a template as apply_chat_template does
// ("tool_use" when a request has tools and the model has one).
//
// # Rendering
//
// Template.Render takes an Input: the messages, the tools, the
// add_generation_prompt flag and any other variables (kwargs such as
// enable_thinking). A server builds the messages from an API request with
// Message, Content (Text or Parts) and ToolCall; tools, tool-call arguments
// and other free-form values are passed as JSON (json.RawMessage) and
// decoded into ordered values, so that a tool's schema or a call's arguments
// render with their keys in the order the client sent them. ParseInput
// decodes an Input from JSON in Hugging Face's shape; Message implements
// json.Unmarshaler for the OpenAI and Hugging Face message shapes.
//
// Errors in the input are plain errors. Errors of the template itself, at
// parse time or at render time, are *Error values that name the template
// and the line that failed; a template's raise_exception(msg) surfaces as a
// *RaiseError inside, which a server may report as a bad request.
//
//	set, err := chat.LoadDir(dir, chat.Options{})
//	...
//	tmpl, err := set.Select("", len(tools) > 0)
//	...
//	prompt, err := tmpl.Render(chat.Input{
//		Messages: []chat.Message{
//			{Role: "user", Content: chat.Text("Weather in Paris?")},
//		},
//		Tools:               tools, // []json.RawMessage, as the client sent them
//		AddGenerationPrompt: true,
//		Kwargs:              map[string]any{"enable_thinking": false},
//	})
//
// # Environment
//
// Templates see what apply_chat_template gives them: messages, tools (none
// when there are none), documents (none unless given as a kwarg),
// add_generation_prompt, the special tokens, and the kwargs. They run as in
// Hugging Face's Jinja environment: trim_blocks and lstrip_blocks on, the
// final newline of the source dropped, break and continue available,
// raise_exception(msg), strftime_now(format) (reading Options.Now, so tests
// can fix the clock), range limited to 100000 items as in Jinja2's sandbox,
// and a tojson filter that writes what Python's json.dumps(x,
// ensure_ascii=False) writes: ", " and ": " separators, no HTML escaping,
// floats as Python prints them (1.0, 1e-07), non-ASCII text and U+2028
// literal, and indent, separators, sort_keys and ensure_ascii honoured with
// the keys left in their order.
//
// # The engine
//
// Templates execute on github.com/ardanlabs/jinja v1.8.0, which has no hooks
// for filters or whitespace handling. The package therefore prepares the
// source it hands to the engine (see source.go): it applies Jinja2's
// whitespace rules itself, where the engine's differ (the engine trims text
// across neighbouring tags, keeps the final newline and "\r\n", and trims
// inside raw blocks); it routes the tojson filter to its own encoder (the
// engine's drops the ".0" of integral floats, escapes U+2028 and U+2029, and
// sorts keys when indenting); and it locates runtime errors, which the
// engine reports without a line, by rendering an instrumented copy of the
// template again after a failure.
//
// Known differences that remain, all of them cases where Jinja2 fails and
// the engine does not, or output formats templates rarely print:
//
//   - The engine is lenient where Jinja2 raises: an attribute of an
//     undefined value, iterating none, adding a string to a number
//     ("a" + 1 gives "a1"), division by zero (gives 0), and changing a list
//     or dict in place (append, update), which Hugging Face's immutable
//     sandbox forbids. Templates that rely on such an error to reject a
//     conversation render instead.
//   - Printing a float ({{ 1.0 }} gives "1", Python "1.0") or a list or
//     dict with {{ }} (the engine's repr does not escape quotes as Python's
//     does). tojson output is exact.
//   - "{% filter tojson %}" blocks use the engine's own tojson.
//   - Integers beyond int64 in JSON input become floats.
//   - A runtime error inside a macro's default argument, a call block or a
//     filter block is put on the last line reached before it.
//   - Message keys render in a fixed order (role, content, reasoning_content,
//     tool_calls, tool_call_id, name, then the extra keys in the order
//     given), whatever their order in a request's JSON.
//
// OutputFormat and OutputParser split a model's generated text, as it
// streams, into reasoning, content and tool calls. Each tool-call format
// (ToolFormat) is one unit in a file of its own, format_NAME.go: how a
// template shows it, its markers, its parser's steps and the syntax a
// grammar forces a call in (ForcedCalls); format.go lists them, output.go
// holds the parsing they share and output_calls.go the readers of calls
// they share. Adding a format is one such file, its entry in toolFormats
// and its tests; TestToolFormatRoundTrip checks that its forced calls
// parse back.
package chat

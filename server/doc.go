// Package server serves models over HTTP in three dialects over one core:
// OpenAI (openai.go, openai_responses.go), Anthropic (anthropic.go) and
// Ollama (ollama.go).
//
// # The core
//
// One dialect-neutral core (core.go) does everything between a decoded
// request and a stream of events: it renders the conversation with the
// model's chat template, tokenizes it, checks it against the context,
// waits in the model's bounded FIFO queue (queue.go), which admits as
// many requests at once as the model runs sequences
// (ModelOptions.Parallel), generates on the model's engine.Scheduler
// (the running sequences advance together, one batch per step; a prompt
// reuses the longest prefix held in whole blocks of the paged cache,
// from any earlier request; the choices of n > 1 run at once), finds
// stop sequences without ever emitting them (stop.go), splits the output
// into content, reasoning and tool calls with package chat's output
// parser, and counts tokens and latencies (metrics.go).
//
// A dialect adapter is a set of handlers that
//
//  1. list their routes in the route table (routes.go): pattern, error
//     writer, flags, handler, and for the OpenAPI document (openapi.go,
//     GET /openapi.json, lem spec) the dialect, a summary, a value of the
//     request's and of the reply's Go type, the media type of a stream
//     and a value of its events' type (or one of each kind of event, told
//     apart by an enum tag on their "type" field; an interface-typed field
//     lists its types in schemaUnions). Replies and events are marshalled
//     from those types, never from maps, so the document cannot drift.
//     Adding a route is adding its entry there: Server.routes registers
//     each through Server.handle, which adds the request id, panic
//     recovery, the Host and Origin checks against DNS rebinding and
//     cross-site requests (guard.go: 403 before the body is read), CORS,
//     the API key check (unless flags has open), the body-size limit and
//     read deadline, metrics and the access log; the document's schemas
//     come from the types by reflection, and a test fails for a route
//     handled but not in the document;
//  2. decode the body with Server.readJSON (413, 408 and 400 errors come
//     back as *Error) and find the model with Server.Model (404 for an
//     unknown id);
//  3. fill a Request: chat.Message values (Messages), tool definitions in
//     the {"type":"function","function":{…}} shape (Tools), a ToolChoice,
//     template Kwargs (enable_thinking, …), MaxTokens, Sample (start from
//     Model.SampleDefaults), Stop, N, Logprobs, JSON or Schema (compile
//     a client's JSON schema with compileSchema, which refuses a keyword
//     lem cannot enforce under strict and otherwise leaves it out, named by
//     noteUnenforced), ThinkingBudget; a completion sets
//     Prompt or PromptIDs instead of Messages. MaxTokensParam,
//     PromptParam and Params name the dialect's fields in error messages.
//     Bounds are not checked here but by Prepare, the same on every
//     dialect (validate.go); a dialect checks only its own message roles
//     (checkRole);
//  4. call Model.PrepareContext, which validates and renders (every error
//     an *Error, 400 for the client's mistakes, naming the field); the
//     request's text is quoted for the template (quote.go), so that only
//     the template's own markup becomes control tokens, and the bytes of
//     prompt text being rendered and tokenized at once are bounded
//     server-wide (admit.go), a prompt being refused as soon as it cannot
//     fit the context;
//  5. call Model.Generate(ctx, prepared, emit). Without emit (nil) it
//     returns the whole Result; with emit it calls it with EventQueued
//     and then EventKeepAlive while the request waits behind others
//     (answer both with stream.wait and the dialect's keep-alive frame:
//     wait.go), EventStart once the request is admitted (send the
//     stream's headers then, if EventQueued did not), then
//     EventContent, EventReasoning and EventToolCall events, and EventEnd
//     per choice (the choices' events interleave, each choice's in
//     order; emit is called from one goroutine at a time) with its finish reason (FinishStop, FinishLength,
//     FinishToolCalls) and the stop sequence that ended it. An error
//     returned by emit, or the request's context ending (the client went
//     away), stops generation within one token, and the prompt's prefill
//     within one step of the scheduler, freeing the request's slot for
//     the queue (full blocks already computed stay in the prefix cache).
//     Errors before
//     the stream started (queue full: 429, shutting down: 503, both with a
//     RetryAfter the error writers send as Retry-After) are *Error values
//     to send as the HTTP response; after it, the dialect reports them
//     in-stream;
//  6. write errors in the dialect's own shape with an errorWriter (see
//     openaiErrors) mapping Error.Status, Code, Param and Message.
//
// Prepare turns what a request demands of the output into one grammar
// constraint (grammar.go, over package constrain): a JSON schema,
// tool_choice required or a named function (a call in the syntax of the
// model's tool-call format, arguments held to the tool's parameters),
// tool_choice none (the format's call marker kept out of the reply), a
// reasoning budget, and thinking turned off where the template does not
// close reasoning itself. Reasoning comes before structure: with thinking
// on, a chat reply may reason freely first, and the JSON value or the
// forced calls begin at the end of the reasoning (its end marker, which a
// reasoning budget forces); with thinking off, or a template that closed
// reasoning in the prompt, they hold from the first token. Package chat
// owns the formats (chat.ToolFormat: detection, markers, streaming parser,
// forced-call syntax); the server knows none by name. Models whose format
// has channels (chat.Channels) reason in a channel rather than between
// markers: their JSON goes in the answer's channel and a forced call after
// reasoning unless thinking is off, and tool_choice none keeps calls out.
//
// The welfare guard (welfare.go, welfare_score.go; on only with
// Config.Welfare) runs at the start of PrepareContext for chat requests
// whose last message is the user's: it scores the user turns and, when
// triggered, asks a Mediator (by default the served model, through its own
// Prepare and Generate) to proceed, rephrase the last message (a copy of
// the Request is prepared) or pause (Generate then answers with the
// pause text as each choice's content, without the model). The outcome
// is kept on the Request, so that preparing it again (Ollama's
// truncation) does not mediate twice. It never looks at the output.
//
// Streams go through stream (sse.go), which sets a write deadline per
// frame and flushes it; per-token frames should be appended by hand into
// its buffer (see chatChunker) so that they allocate nothing.
package server

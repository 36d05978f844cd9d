package server

import "github.com/lem-engine/lem/chat"

// The model-output parser of package chat splits generated text into
// reasoning (between the model's thinking markers), content and tool calls
// in the format of the model's template. These names keep the core's use of
// it in one place.

type (
	outputEvent  = chat.OutputEvent
	outputFormat = chat.OutputFormat
)

const (
	outputContent   = chat.OutputContent
	outputReasoning = chat.OutputReasoning
	outputToolCall  = chat.OutputToolCall
)

func detectOutputFormat(t *chat.Template) outputFormat { return chat.DetectOutputFormat(t) }

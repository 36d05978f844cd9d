// Package tiny embeds lem-tiny, the small chat model lem runs when no model
// is named: a Qwen3-architecture network of about 5M parameters (hidden
// size 256, 6 layers, tied embeddings, bf16 weights, 10 MB) with its own
// 1,073-token byte-level BPE tokenizer, trained for this project on
// synthetic conversations. Under greedy decoding it answers the capitals of
// 30 countries, sums and differences of numbers up to 50, word reversal and
// greetings; it calls the get_weather and add tools when they are declared
// and answers from their results; it reasons inside <think></think> unless
// enable_thinking is false. It knows nothing else.
//
// The files are those of the model's Hugging Face directory, byte for
// byte, except the chat template, which is lem's own (chat_template.jinja)
// and renders exactly the prompts the model was trained on.
// engine.OpenTiny loads them in place: the weights are never copied and no
// file is written.
package tiny

import (
	_ "embed"
	"unsafe"
)

// Name is the model's name in the CLI, the servers' model lists and logs.
const Name = "lem-tiny"

// Parameters is the model's parameter count.
const Parameters = 4_997_376

// The small files of the model directory.
var (
	//go:embed config.json
	Config string
	//go:embed generation_config.json
	GenerationConfig string
	//go:embed tokenizer.json
	Tokenizer string
	//go:embed tokenizer_config.json
	TokenizerConfig string
	//go:embed chat_template.jinja
	ChatTemplate string
)

//go:embed model.safetensors
var weights string

// Weights returns the model's model.safetensors file. The bytes are the
// program's read-only data, shared by every caller: writing to them crashes
// the program.
func Weights() []byte {
	return unsafe.Slice(unsafe.StringData(weights), len(weights))
}

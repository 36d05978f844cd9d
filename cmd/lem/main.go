// Command lem loads large language models (Hugging Face safetensors
// directories or GGUF files), runs them on the CPU or an NVIDIA GPU, and
// serves them through the OpenAI, Anthropic and Ollama APIs.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "lem",
		Short: "Run large language models locally",
		Long: `lem loads a model (a Hugging Face safetensors directory or a GGUF file),
runs it on the CPU or an NVIDIA GPU, and serves it through the OpenAI,
Anthropic and Ollama APIs.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newInspectCmd(),
		newTokenizeCmd(),
		newTemplateCmd(),
		newGenerateCmd(),
		newRunCmd(),
		newBenchCmd(),
		newSynthCmd(),
		newServeCmd(),
		newQuantCmd(),
		newLoadCmd(),
		newPullCmd(),
		newListCmd(),
		newRmCmd(),
		newPsCmd(),
	)
	addModelsHelp(root)
	return root
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "lem:", err)
		os.Exit(1)
	}
}

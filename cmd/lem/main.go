// Command lem loads large language models (Hugging Face safetensors
// directories or GGUF files), runs them on the CPU or an NVIDIA GPU, and
// serves them through the OpenAI, Anthropic and Ollama APIs.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "lem",
		Short: "Run large language models locally",
		Long: `lem loads a model (a Hugging Face safetensors directory or a GGUF file),
runs it on the CPU or an NVIDIA GPU, and serves it through the OpenAI,
Anthropic and Ollama APIs.`,
		Version:       buildVersion(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cobra.AddTemplateFunc("versionText", versionText)
	root.SetVersionTemplate("{{ versionText }}")
	root.AddCommand(
		newVersionCmd(),
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
		newSpecCmd(),
	)
	return root
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "lem:", err)
		os.Exit(1)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/chat"
)

func newTemplateCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "template PATH",
		Short: "Render a model's chat template",
		Long: `Template reads a JSON object from standard input,

  {"messages": [...], "tools": [...], "add_generation_prompt": true, "kwargs": {...}}

renders it with the chat template of the model at PATH (a Hugging Face model
directory or a GGUF file) and prints the prompt exactly, with no newline
added. Keys keep their order; kwargs (such as enable_thinking) become template
variables.`,
		Example: `  echo '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true}' | lem template ../shared/fixtures/chat-model
  lem template --name tool_use model-dir < conversation.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return err
			}
			in, err := parseTemplateInput(data)
			if err != nil {
				return err
			}
			src, err := openSource(args[0])
			if err != nil {
				return err
			}
			defer src.Close()
			set, err := src.Templates()
			if err != nil {
				return err
			}
			tmpl, err := set.Select(name, len(in.Tools) > 0)
			if err != nil {
				return err
			}
			out, err := tmpl.Render(in)
			if err != nil {
				return err
			}
			_, err = io.WriteString(cmd.OutOrStdout(), out)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "render the named template (such as tool_use) instead of the default")
	return cmd
}

// parseTemplateInput decodes the template command's input, whose template
// variables sit under "kwargs".
func parseTemplateInput(data []byte) (chat.Input, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		return chat.Input{}, fmt.Errorf("template input must be a JSON object: %v", err)
	}
	kwargs := top["kwargs"]
	delete(top, "kwargs")
	for k := range top {
		switch k {
		case "messages", "tools", "add_generation_prompt":
		default:
			return chat.Input{}, fmt.Errorf("template input: unknown key %q (template variables go under \"kwargs\")", k)
		}
	}
	if len(kwargs) > 0 && string(kwargs) != "null" {
		var kw map[string]json.RawMessage
		if err := json.Unmarshal(kwargs, &kw); err != nil {
			return chat.Input{}, fmt.Errorf("template input: kwargs must be an object: %w", err)
		}
		for k, v := range kw {
			if _, dup := top[k]; dup {
				return chat.Input{}, fmt.Errorf("template input: kwarg %q clashes with a reserved key", k)
			}
			top[k] = v
		}
	}
	flat, err := json.Marshal(top)
	if err != nil {
		return chat.Input{}, err
	}
	return chat.ParseInput(flat)
}

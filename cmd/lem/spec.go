package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/server"
)

func newSpecCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "spec",
		Short: "Print the OpenAPI document of the server's routes",
		Long: `Spec writes the OpenAPI 3.1 document of every route lem serve answers, as
JSON, to standard output or to the file -o names. A running server serves the
same document at GET /openapi.json.`,
		Example: `  lem spec > openapi.json
  lem spec -o openapi.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := server.OpenAPI(releaseVersion())
			if err != nil {
				return err
			}
			if out == "" {
				_, err = cmd.OutOrStdout().Write(doc)
				return err
			}
			if err := os.WriteFile(out, doc, 0o644); err != nil {
				return fmt.Errorf("spec: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the document to this file")
	return cmd
}

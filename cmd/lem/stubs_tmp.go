package main

import "github.com/spf13/cobra"

// Temporary placeholders, replaced as the packages land.
func newInspectCmd() *cobra.Command  { return &cobra.Command{Use: "inspect PATH", Hidden: true} }
func newTokenizeCmd() *cobra.Command { return &cobra.Command{Use: "tokenize PATH TEXT...", Hidden: true} }
func newTemplateCmd() *cobra.Command { return &cobra.Command{Use: "template PATH", Hidden: true} }

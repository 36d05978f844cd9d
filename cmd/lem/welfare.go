package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/lem-engine/lem/server"
)

// welfareFlags are lem serve's flags of the welfare guard.
type welfareFlags struct {
	on        bool
	words     string
	audit     string
	auditText bool
	threshold float64
	sustained float64
	turns     int
	decay     float64
}

func (w *welfareFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&w.on, "welfare", false, "turn on the welfare guard: hostile user turns are mediated by the served model (off by default)")
	fs.StringVar(&w.words, "welfare-words", "", "file of more words the welfare guard counts as insults, one a line (# comments)")
	fs.StringVar(&w.audit, "welfare-audit", "", "append the welfare guard's triggers to this file as JSON lines (default: the log)")
	fs.BoolVar(&w.auditText, "welfare-audit-text", false, "put the user's message and the mediation's answer in the welfare audit")
	fs.Float64Var(&w.threshold, "welfare-threshold", server.DefaultWelfareThreshold, "score of one user message that triggers the welfare guard")
	fs.Float64Var(&w.sustained, "welfare-sustained", server.DefaultWelfareSustained, "decayed sum over the recent user turns that triggers the welfare guard")
	fs.IntVar(&w.turns, "welfare-turns", server.DefaultWelfareTurns, "user turns the welfare guard's sum covers")
	fs.Float64Var(&w.decay, "welfare-decay", server.DefaultWelfareDecay, "weight of each earlier user turn in the welfare guard's sum, in (0, 1]")
}

// config returns the guard's configuration (nil without --welfare) and a
// function that closes the audit file.
func (w *welfareFlags) config() (*server.WelfareConfig, func() error, error) {
	none := func() error { return nil }
	if !w.on {
		for _, f := range []struct {
			name string
			set  bool
		}{{"--welfare-words", w.words != ""}, {"--welfare-audit", w.audit != ""}, {"--welfare-audit-text", w.auditText}} {
			if f.set {
				return nil, none, fmt.Errorf("%s needs --welfare", f.name)
			}
		}
		return nil, none, nil
	}
	if w.threshold <= 0 || w.sustained <= 0 || w.turns <= 0 || w.decay <= 0 || w.decay > 1 {
		return nil, none, fmt.Errorf("--welfare-threshold, --welfare-sustained and --welfare-turns must be positive and --welfare-decay in (0, 1] (got %v, %v, %d, %v)",
			w.threshold, w.sustained, w.turns, w.decay)
	}
	cfg := &server.WelfareConfig{Threshold: w.threshold, Sustained: w.sustained, Turns: w.turns, Decay: w.decay, AuditText: w.auditText}
	if w.words != "" {
		f, err := os.Open(w.words)
		if err != nil {
			return nil, none, fmt.Errorf("--welfare-words: %w", err)
		}
		cfg.Words, err = server.ReadWelfareWords(f)
		f.Close()
		if err != nil {
			return nil, none, fmt.Errorf("--welfare-words %s: %w", w.words, err)
		}
	}
	if w.audit != "" {
		f, err := os.OpenFile(w.audit, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, none, fmt.Errorf("--welfare-audit: %w", err)
		}
		cfg.Audit = f
		return cfg, f.Close, nil
	}
	return cfg, none, nil
}

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/lem-engine/lem/engine"
)

// openPlanned checks the model at path ("" for lem-tiny) against the memory
// available with engine.PlanMemory before loading it, says on standard
// error which context it chose and why (and any warning), loads it, and
// sets the model's default context to the one chosen.
func openPlanned(path string, opts engine.Options, ctx int, quiet bool) (*engine.Model, error) {
	plan, err := engine.PlanMemory(path, opts.Backend, ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range plan.Warnings {
		fmt.Fprintln(os.Stderr, "lem: warning:", w)
	}
	if !quiet {
		fmt.Fprintf(os.Stderr, "lem: context %d tokens (%s)\n", plan.Context, plan.Reason)
	}
	var m *engine.Model
	if path == "" {
		m, err = engine.OpenTiny(opts)
	} else {
		bar := newLoadBar(os.Stderr, quiet)
		opts.Progress = bar.progress()
		m, err = engine.Open(path, opts)
		bar.finish(err == nil)
	}
	if err != nil {
		if opts.NoMmap && errors.Is(err, syscall.ENOMEM) {
			return nil, fmt.Errorf("%w: --no-mmap (or LEM_NO_MMAP) reads all %.2f GiB of weights into memory at once; "+
				"without it the file is mapped and read as needed, or use a smaller quantization", err, float64(plan.Weights)/(1<<30))
		}
		return nil, err
	}
	m.Context = plan.Context
	return m, nil
}

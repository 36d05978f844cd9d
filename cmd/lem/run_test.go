package main

import (
	"strings"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// TestRunCmd drives the terminal chat through standard input: two turns
// sharing the conversation, a multi-line message, /reset and /bye.
func TestRunCmd(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	in := strings.Join([]string{
		"What is the capital of Japan?",
		"What is the capital of France?",
		`"""`, "What is the capital of Italy?", `"""`,
		"/reset",
		"What is the capital of Spain?",
		"/bye",
		"this line is never read",
	}, "\n") + "\n"
	out, err := execLemIn(t, in, "run", dir, "--temperature", "0", "--no-think")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"The capital of Japan is Tokyo.",
		"The capital of France is Paris.",
		"The capital of Italy is Rome.",
		"Conversation cleared.",
		"The capital of Spain is Madrid.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, ">>> ") != 6 || strings.Count(out, "... ") != 2 {
		t.Errorf("want 6 prompts and 2 continuation prompts, output:\n%s", out)
	}
}

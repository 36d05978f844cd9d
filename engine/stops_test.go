package engine

import "testing"

func TestEndsTurn(t *testing.T) {
	const (
		chatML  = `{{ '<|im_start|>' + m.role }}{{ m.content + '<|im_end|>' }}`
		phi3    = `{{ '<|user|>' + m.content + '<|end|>' }}`
		harmony = `{{ '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|end|>' }}{{ '<|call|>' }}{{ '<|return|>' }}`
	)
	tests := []struct {
		tok, src string
		want     bool
	}{
		{"<|im_end|>", chatML, true},
		{"<|eot_id|>", chatML, false},
		{"<|end|>", phi3, true},
		{"<|end|>", harmony, false}, // ends a message; the turn goes on
		{"<|return|>", harmony, true},
		{"<|call|>", harmony, true},
	}
	for _, tc := range tests {
		if got := endsTurn(tc.tok, tc.src); got != tc.want {
			t.Errorf("endsTurn(%q, %q) = %v, want %v", tc.tok, tc.src, got, tc.want)
		}
	}
}

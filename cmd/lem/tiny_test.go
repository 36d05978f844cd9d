package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// execLemErr runs lem with args and standard input, returning standard
// output and standard error.
func execLemErr(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = execute(root, args)
	return out.String(), errOut.String(), err
}

// TestRunTiny chats with the built-in model: lem run without a path.
func TestRunTiny(t *testing.T) {
	in := "What is the capital of Japan?\nWhat is 12 + 30?\n/reset\nReverse the word garden.\n/bye\n"
	out, errOut, err := execLemErr(t, in, "run", "--temperature", "0", "--no-think")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"The capital of Japan is Tokyo.", "12 + 30 = 42.", "Conversation cleared.", "nedrag"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "lem-tiny (embedded, 5M parameters)") || !strings.Contains(errOut, "`lem run PATH`") {
		t.Errorf("startup line does not introduce lem-tiny:\n%s", errOut)
	}

	// Thinking is on by default.
	out, _, err = execLemErr(t, "Hello!\n", "run", "--temperature", "0")
	if err != nil {
		t.Fatal(err)
	}
	if want := "<think>\nThe user greets me. I greet them back.\n</think>\n\nHello! How can I help you today?"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

// TestGenerateTiny generates with the built-in model: lem generate without
// a path.
func TestGenerateTiny(t *testing.T) {
	out, err := execLemIn(t, "", "generate", "--chat", "--prompt", "What is the capital of Japan?", "--temperature", "0", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got generateOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := "<think>\nThe user asks for the capital of Japan. It is Tokyo.\n</think>\n\nThe capital of Japan is Tokyo."
	if got.Text != want || got.StopReason != "stop" {
		t.Errorf("got %+v, want text %q ending on a stop token", got, want)
	}

	out, err = execLemIn(t, "", "generate", "--prompt", "What is", "--temperature", "0", "--max-tokens", "3")
	if err != nil || len(out) <= 1 {
		t.Errorf("plain prompt: %q, %v", out, err)
	}
}

func TestTinyArgs(t *testing.T) {
	for _, args := range [][]string{
		{"run", "a", "b", "c"},
		{"generate", "a", "b", "--prompt", "x"},
	} {
		if _, err := execLemIn(t, "", args...); err == nil || !strings.Contains(err.Error(), "accepts at most") {
			t.Errorf("%v: err = %v, want a complaint about the arguments", args, err)
		}
	}
	if _, err := execLemIn(t, "", "generate"); err == nil || !strings.Contains(err.Error(), "exactly one of") {
		t.Errorf("generate without a prompt: err = %v", err)
	}
}

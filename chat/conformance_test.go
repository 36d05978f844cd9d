package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lem-engine/lem/internal/fixtures"
)

// fixedNow is the clock of the reference renders (see the library notes).
func fixedNow() time.Time { return time.Date(2025, 1, 15, 0, 0, 0, 0, time.UTC) }

// chatRender is one entry of chat_renders in a tokenizer fixture.
type chatRender struct {
	Messages []Message                  `json:"messages"`
	Kwargs   map[string]json.RawMessage `json:"kwargs"`
	Tools    []json.RawMessage          `json:"tools"`
	Text     *string                    `json:"text"`
	Error    *string                    `json:"error"`
}

// pythonError matches the message in a fixture's error, such as
// "TemplateError('Conversation roles must alternate ...')".
var pythonError = regexp.MustCompile(`^\w+\((['"])(.*)['"]\)$`)

func TestTokenizerChatRenders(t *testing.T) {
	for _, family := range []string{"qwen3", "llama3", "gemma3"} {
		t.Run(family, func(t *testing.T) {
			dir := fixtures.Dir(t, "tokenizers", family)
			set, err := LoadDir(dir, Options{Now: fixedNow})
			if err != nil {
				t.Fatal(err)
			}
			tmpl := set.Default()
			if tmpl == nil {
				t.Fatal("no default template")
			}
			data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
			if err != nil {
				t.Fatal(err)
			}
			var ref struct {
				ChatRenders []chatRender `json:"chat_renders"`
			}
			if err := json.Unmarshal(data, &ref); err != nil {
				t.Fatal(err)
			}
			if len(ref.ChatRenders) == 0 {
				t.Fatal("no chat_renders in reference.json")
			}
			for i, c := range ref.ChatRenders {
				t.Run(strconv.Itoa(i), func(t *testing.T) {
					in := Input{
						Messages:            c.Messages,
						Tools:               c.Tools,
						AddGenerationPrompt: true,
					}
					for k, v := range c.Kwargs {
						if in.Kwargs == nil {
							in.Kwargs = make(map[string]any)
						}
						in.Kwargs[k] = v
					}
					got, err := tmpl.Render(in)
					switch {
					case c.Error != nil:
						if err == nil {
							t.Fatalf("render succeeded, want error %s; got %q", *c.Error, got)
						}
						m := pythonError.FindStringSubmatch(*c.Error)
						if m == nil {
							t.Fatalf("cannot read fixture error %q", *c.Error)
						}
						var raised *RaiseError
						if !errors.As(err, &raised) || raised.Message != m[2] {
							t.Errorf("error = %v, want a RaiseError %q", err, m[2])
						}
						var terr *Error
						if !errors.As(err, &terr) || terr.Line == 0 {
							t.Errorf("error %v does not name the template line", err)
						}
						if !strings.Contains(err.Error(), m[2]) {
							t.Errorf("error %q does not contain %q", err, m[2])
						}
					case c.Text != nil:
						if err != nil {
							t.Fatal(err)
						}
						if got != *c.Text {
							t.Errorf("render mismatch\n got: %q\nwant: %q", got, *c.Text)
						}
					default:
						t.Fatal("fixture entry has neither text nor error")
					}
				})
			}
		})
	}
}

func TestChatModelPrompts(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	set, err := LoadDir(dir, Options{Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := set.Default()
	if tmpl == nil {
		t.Fatal("no default template")
	}
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			Messages       []Message         `json:"messages"`
			Tools          []json.RawMessage `json:"tools"`
			EnableThinking *bool             `json:"enable_thinking"`
			Prompt         string            `json:"prompt"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) == 0 {
		t.Fatal("no cases in reference.json")
	}
	for i, c := range ref.Cases {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			in := Input{Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: true}
			if c.EnableThinking != nil {
				in.Kwargs = map[string]any{"enable_thinking": *c.EnableThinking}
			}
			got, err := tmpl.Render(in)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.Prompt {
				t.Errorf("render mismatch\n got: %q\nwant: %q", got, c.Prompt)
			}
		})
	}
}

func TestLoadDirWithoutTemplate(t *testing.T) {
	_, err := LoadDir(fixtures.Dir(t, "tokenizers", "llama2"), Options{})
	if !errors.Is(err, ErrNoTemplate) {
		t.Errorf("error = %v, want ErrNoTemplate", err)
	}
}

// TestRenderConcurrent renders one template from several goroutines, on the
// success and the error path (run it with -race).
func TestRenderConcurrent(t *testing.T) {
	set, err := LoadDir(fixtures.Dir(t, "tokenizers", "gemma3"), Options{Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := set.Default()
	good := Input{Messages: []Message{{Role: "user", Content: Text("hi")}}, AddGenerationPrompt: true}
	bad := Input{Messages: []Message{{Role: "assistant", Content: Text("hi")}}}
	want, err := tmpl.Render(good)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			for range 20 {
				if i%2 == 0 {
					if got, err := tmpl.Render(good); err != nil || got != want {
						errs <- fmt.Errorf("render: %q, %v", got, err)
						return
					}
				} else {
					var terr *Error
					if _, err := tmpl.Render(bad); !errors.As(err, &terr) || terr.Line == 0 {
						errs <- fmt.Errorf("error render: %v", err)
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

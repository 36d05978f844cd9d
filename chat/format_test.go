package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// TestToolFormatRoundTrip ties the two halves of each format together: the
// calls a grammar forces, written in the format's forced-call syntax, are
// read back by the format's own streaming parser as the same calls, with
// nothing left over as content, however the text is cut. It does so after
// each kind of reasoning the format may write first, as a grammar lets a
// model reason before a forced call.
func TestToolFormatRoundTrip(t *testing.T) {
	calls := []ParsedToolCall{
		{Name: "get_weather", Arguments: json.RawMessage(`{"city": "Paris", "days": [1, 2], "units": {"t": "°C"}}`)},
		{Name: "ns.no_args-2", Arguments: json.RawMessage(`{}`)},
	}
	for _, f := range ToolFormats() {
		t.Run(f.Name(), func(t *testing.T) {
			fc := f.Forced()
			if fc.Syntax == (CallSyntax{}) {
				t.Fatal("no forced-call syntax")
			}
			sets := [][]ParsedToolCall{calls[:1], calls[1:]}
			if fc.Multiple {
				sets = append(sets, calls)
			}
			for _, set := range sets {
				text := fc.Syntax.Render(set)
				var want parsed
				for _, c := range set {
					want.Calls = append(want.Calls, c.Name+" "+compact(t, c.Arguments))
				}
				t.Run(fmt.Sprintf("%d calls", len(set)), func(t *testing.T) {
					checkAllFeeds(t, OutputFormat{Tools: f}, false, true, text, want)
				})
				withReasoning := want
				withReasoning.Reasoning = "Use the tool."
				if ch := f.Channels(); ch != nil {
					t.Run("after the reasoning channel", func(t *testing.T) {
						checkAllFeeds(t, OutputFormat{Tools: f}, false, true, ch.Reasoning+"Use the tool."+ch.Next+text, withReasoning)
					})
					continue
				}
				for _, m := range thinkMarkers {
					t.Run("after "+m.start, func(t *testing.T) {
						of := OutputFormat{ThinkStart: m.start, ThinkEnd: m.end, Tools: f}
						checkAllFeeds(t, of, false, true, m.start+"Use the tool."+m.end+"\n\n"+text, withReasoning)
						checkAllFeeds(t, of, true, true, "Use the tool."+m.end+text, withReasoning)
					})
				}
			}
			// Without tools offered the same text is no call.
			text := fc.Syntax.Render(calls[:1])
			if got := parseChunks(t, OutputFormat{Tools: f}, false, false, text, nil); len(got.Calls) != 0 {
				t.Errorf("tools not offered: parsed calls %q", got.Calls)
			}
		})
	}
}

// TestChannelsRoundTrip writes a JSON answer and reasoning the way a
// grammar holds a format with channels to them, and reads them back.
func TestChannelsRoundTrip(t *testing.T) {
	n := 0
	for _, f := range ToolFormats() {
		ch := f.Channels()
		if ch == nil {
			continue
		}
		n++
		t.Run(f.Name(), func(t *testing.T) {
			if ch.NextCommit <= 0 || ch.NextCommit > len(ch.Next) {
				t.Errorf("NextCommit %d outside Next %q", ch.NextCommit, ch.Next)
			}
			of := OutputFormat{Tools: f}
			if !of.Reasons() || of.InReasoning(ch.Reasoning) {
				t.Errorf("Reasons() = %v, InReasoning = %v; want true, false", of.Reasons(), of.InReasoning(ch.Reasoning))
			}
			answer := `{"a": [1, "x"]}`
			for _, tools := range []bool{false, true} {
				checkAllFeeds(t, of, false, tools, ch.Answer+answer, parsed{Content: answer})
				checkAllFeeds(t, of, false, tools, ch.Reasoning+"Think.\n"+ch.Next+ch.Answer+answer, parsed{Reasoning: "Think.", Content: answer})
				checkAllFeeds(t, of, true, tools, "Think."+ch.Next+ch.Answer+answer, parsed{Reasoning: "Think.", Content: answer})
			}
		})
	}
	if n == 0 {
		t.Fatal("no format has channels")
	}
}

// TestToolFormatRegistry checks the registry: unique names, found by name,
// printed by name, and detected from a template showing their markers.
func TestToolFormatRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range ToolFormats() {
		name := f.Name()
		if name == "" || seen[name] {
			t.Errorf("format name %q empty or repeated", name)
		}
		seen[name] = true
		if got := LookupToolFormat(name); got != f {
			t.Errorf("LookupToolFormat(%q) = %v, want %v", name, got, f)
		}
		if got := fmt.Sprint(f); got != name {
			t.Errorf("fmt.Sprint = %q, want %q", got, name)
		}
		// A template that writes a forced call in the format is in it.
		fc := f.Forced()
		if fc.Marker != "" && !f.detect(fc.Marker) && !f.detect(fc.Syntax.Open+fc.Syntax.Call) {
			t.Errorf("marker %q is not detected", fc.Marker)
		}
	}
	if LookupToolFormat("none") != nil {
		t.Error("LookupToolFormat found an unknown format")
	}
	for _, want := range []ToolFormat{ToolsHermes, ToolsLlama3, ToolsMistral, ToolsGemma, ToolsHarmony} {
		if LookupToolFormat(want.Name()) != want {
			t.Errorf("%v is not registered", want)
		}
	}
	// The registry returns a copy.
	ToolFormats()[0] = nil
	if ToolFormats()[0] == nil {
		t.Error("ToolFormats returned the registry itself")
	}
}

// compact returns raw JSON without insignificant white space.
func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

package server

import (
	"strings"
	"testing"
)

func TestWelfareScoreText(t *testing.T) {
	s, err := newWelfareScorer(&WelfareConfig{Words: []string{"Zorblax"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		text string
		want WelfareScore // Sustained and Turns left out
		trig bool
	}{
		{"benign", "What is the capital of Japan?", WelfareScore{}, false},
		{"scunthorpe", "I live in Scunthorpe and love my class on assessment; Dickens and cocktails too.", WelfareScore{}, false},
		{"numbers", "What is 13 plus 37? And 1337 minus 404?", WelfareScore{}, false},
		{"acronym", "Is NASA older than the ESA?", WelfareScore{}, false},
		{"one swear", "well shit, that broke", WelfareScore{Insults: 1, Turn: 1}, false},
		{"directed", "you idiot", WelfareScore{Insults: 1, Directed: 1, Turn: 2}, true},
		{"directed after", "fuck you", WelfareScore{Insults: 1, Directed: 1, Turn: 2}, true},
		{"you are so", "You are so stupid.", WelfareScore{Insults: 1, Directed: 1, Turn: 2}, true},
		{"leetspeak", "y0u 1d10t", WelfareScore{Insults: 1, Directed: 1, Turn: 2}, true},
		{"leet symbols", "u r $tup!d", WelfareScore{Insults: 1, Directed: 1, Turn: 2}, true},
		{"one as l", "you 1oser", WelfareScore{Insults: 1, Directed: 1, Turn: 2}, true},
		{"repeated letters", "youuu iddiooottt", WelfareScore{Insults: 1, Directed: 1, Turn: 2}, true},
		{"separators", "f.u.c.k this", WelfareScore{Insults: 1, Turn: 1}, false},
		{"spaced", "f u c k", WelfareScore{Insults: 1, Turn: 1}, false},
		{"dotted after a letter", "what a m.o.r.o.n", WelfareScore{Insults: 1, Turn: 1}, false},
		{"letters", "a b c d e", WelfareScore{}, false},
		{"suffix", "these idiots are fucking useless", WelfareScore{Insults: 3, Turn: 3}, true},
		{"extra word", "zorbllaaxx", WelfareScore{Insults: 1, Turn: 1}, false},
		{"threat", "I will kill you", WelfareScore{Threats: 1, Turn: 2}, true},
		{"not a threat", "killing time with you is fun", WelfareScore{}, false},
		{"kill no target", "kill the process", WelfareScore{}, false},
		{"kys", "just kys", WelfareScore{Threats: 1, Turn: 2}, true},
		{"caps", "WHY IS THIS NOT WORKING", WelfareScore{Caps: 1, Turn: 0.5}, false},
		{"exclaim", "answer me!!! now?!?!", WelfareScore{Exclaim: 2, Turn: 1}, false},
		{"one caps run", "WHY WONT YOU WORK!!! ANSWER ME NOW", WelfareScore{Caps: 1, Exclaim: 1, Turn: 1}, false},
		{"caps and exclaim capped", "WHY WONT YOU WORK!!! please ANSWER ME NOW!!! what IS GOING ON!!!", WelfareScore{Caps: 3, Exclaim: 3, Turn: 2}, true},
		{"shouted insult", "YOU ARE USELESS!!!", WelfareScore{Insults: 1, Directed: 1, Caps: 1, Exclaim: 1, Turn: 3}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, trig := s.score([]string{tt.text})
			tt.want.Sustained, tt.want.Turns = tt.want.Turn, 1
			if got != tt.want || trig != tt.trig {
				t.Errorf("score(%q) = %+v, %v; want %+v, %v", tt.text, got, trig, tt.want, tt.trig)
			}
		})
	}
}

func TestWelfareSustained(t *testing.T) {
	s, err := newWelfareScorer(&WelfareConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mild := "this is shit"     // 1 each
	calm := "what is 2 plus 3" // 0
	tests := []struct {
		name      string
		turns     []string
		sustained float64
		n         int
		trig      bool
	}{
		{"one mild", []string{mild}, 1, 1, false},
		{"three mild", []string{mild, mild, mild}, 1 + 0.7 + 0.49, 3, false},
		{"four mild", []string{mild, mild, mild, mild}, 1 + 0.7 + 0.49 + 0.343, 4, true},
		{"calm now", []string{mild, mild, mild, mild, calm}, 0.7 + 0.49 + 0.343 + 0.2401, 5, false},
		{"old turns forgotten", []string{mild, mild, mild, calm, calm, calm, calm, calm, mild}, 1, 6, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, trig := s.score(tt.turns)
			if d := got.Sustained - tt.sustained; d > 1e-9 || d < -1e-9 || got.Turns != tt.n || trig != tt.trig {
				t.Errorf("sustained %v over %d turns, trigger %v; want %v over %d, %v", got.Sustained, got.Turns, trig, tt.sustained, tt.n, tt.trig)
			}
		})
	}
}

func TestWelfareConfigErrors(t *testing.T) {
	for _, cfg := range []WelfareConfig{{Threshold: -1}, {Sustained: -1}, {Turns: -2}, {Decay: 1.5}, {Decay: -0.1}, {Words: []string{"123"}}} {
		if _, err := newWelfareScorer(&cfg); err == nil || !strings.HasPrefix(err.Error(), "welfare: ") {
			t.Errorf("%+v: got %v, want an error", cfg, err)
		}
	}
	if _, err := New(Config{Welfare: &WelfareConfig{Decay: 2}}, nil); err == nil {
		t.Error("New took a bad welfare configuration")
	}
}

func TestReadWelfareWords(t *testing.T) {
	got, err := ReadWelfareWords(strings.NewReader("# insults\nfoo\n\n  Bar  \n"))
	if err != nil || strings.Join(got, ",") != "foo,Bar" {
		t.Errorf("got %q, %v", got, err)
	}
	for _, bad := range []string{"two words\n", "ok\n1234\n"} {
		if _, err := ReadWelfareWords(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%q: got %v, want an error naming the line", bad, err)
		}
	}
}

func TestParseWelfareDecision(t *testing.T) {
	tests := []struct {
		answer, decision, text string
		ok                     bool
	}{
		{"PROCEED", welfareProceed, "", true},
		{"  proceed.\n", welfareProceed, "", true},
		{"Proceed - it is fine", welfareProceed, "", true},
		{"REPHRASE: What is the capital of Japan?", welfareRephrase, "What is the capital of Japan?", true},
		{"rephrase :   please help  \n", welfareRephrase, "please help", true},
		{"\nPAUSE: Let's take a short break.", welfarePause, "Let's take a short break.", true},
		{"Pause:\n  See you soon.", welfarePause, "See you soon.", true},
		{"PAUSE:", "", "", false},
		{"REPHRASE", "", "", false},
		{"PAUSE it", "", "", false},
		{"PROCEEDING", "", "", false},
		{"The capital of Japan is Tokyo.", "", "", false},
		{"", "", "", false},
		{"pauſe: x", "", "", false},
		{"I think PROCEED", "", "", false},
	}
	for _, tt := range tests {
		d, text, ok := parseWelfareDecision(tt.answer)
		if d != tt.decision || text != tt.text || ok != tt.ok {
			t.Errorf("parseWelfareDecision(%q) = %q, %q, %v; want %q, %q, %v", tt.answer, d, text, ok, tt.decision, tt.text, tt.ok)
		}
	}
}

func FuzzWelfareScore(f *testing.F) {
	for _, s := range []string{"you 1d10t!!!", "f.u.c.k", "SCUNTHORPE", "a b c d", "sh!t|", "ſ\xff"} {
		f.Add(s)
	}
	s, err := newWelfareScorer(&WelfareConfig{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string) {
		sc, _ := s.score([]string{text, text})
		if sc.Turn < 0 || sc.Sustained < sc.Turn {
			t.Errorf("%q: %+v", text, sc)
		}
		parseWelfareDecision(text)
	})
}

package loadgen

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/server"
)

var (
	tinyOnce sync.Once
	tinyEng  *engine.Model
	tinyErr  error
)

// serveTiny serves lem-tiny as "lem-tiny" on a loopback port, as lem
// serve does, running parallel sequences at once.
func serveTiny(t *testing.T, cfg server.Config, parallel int) string {
	t.Helper()
	tinyOnce.Do(func() { tinyEng, tinyErr = engine.OpenTiny(engine.Options{Backend: cpu.New(0)}) })
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	m, err := server.NewModel("lem-tiny", tinyEng, server.ModelOptions{Parallel: parallel})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := server.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); ts.Close() })
	return ts.URL
}

// metric reads one counter of the server's /metrics.
func metric(t *testing.T, base, name string) int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+`{model="lem-tiny"} `); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return int(n)
		}
	}
	return 0
}

func ordered(t *testing.T, name string, s Stats, n int) {
	t.Helper()
	if s.N != n || !(0 < s.P50 && s.P50 <= s.P90 && s.P90 <= s.P99) || s.Mean <= 0 {
		t.Errorf("%s: want %d samples with 0 < p50 ≤ p90 ≤ p99, got %+v", name, n, s)
	}
}

func TestRunAgainstLem(t *testing.T) {
	for _, endpoint := range []string{Chat, Completions} {
		t.Run(endpoint, func(t *testing.T) {
			base := serveTiny(t, server.Config{}, 4)
			rep, err := Run(t.Context(), Config{URL: base, Endpoint: endpoint, Concurrency: 4, Requests: 8,
				PromptTokens: 24, OutputTokens: 12, SharedPrefix: 0.5, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Model != "lem-tiny" {
				t.Errorf("model from /v1/models: %q", rep.Model)
			}
			if rep.Sent != 8 || rep.Completed != 8 || rep.Failed != 0 || rep.UsageMissing != 0 || rep.Interrupted {
				t.Fatalf("report: %+v", rep)
			}
			if got, want := rep.OutputTokensTotal, metric(t, base, "lem_generated_tokens_total"); got != want || got == 0 {
				t.Errorf("output tokens %d, the server generated %d", got, want)
			}
			if got, want := rep.PromptTokensTotal, metric(t, base, "lem_prompt_tokens_total"); got != want || got == 0 {
				t.Errorf("prompt tokens %d, the server read %d", got, want)
			}
			// lem honours ignore_eos: every request gets its 12 tokens
			// (though a chunk may carry no text, as when the detokenizer
			// holds back part of a character).
			gaps, first := 0, 0
			for _, r := range rep.results {
				if r.Chunks > 0 {
					gaps += r.Chunks - 1
					first++
					if r.TTFT <= 0 || r.TTFT > r.E2E {
						t.Errorf("TTFT %v, E2E %v", r.TTFT, r.E2E)
					}
				}
				if r.OutputTokens < r.Chunks || r.OutputTokens != 12 {
					t.Errorf("%d output tokens in %d chunks, want 12", r.OutputTokens, r.Chunks)
				}
			}
			if first == 0 {
				t.Fatal("no request got a token")
			}
			ordered(t, "ttft", rep.TTFT, first)
			ordered(t, "e2e", rep.E2E, 8)
			ordered(t, "itl", rep.ITL, gaps)
			// (TTFT and E2E percentiles may be over different requests,
			// so only each request's pair is ordered.)
			if rep.RequestsPerS <= 0 || rep.OutputTokensPerS <= 0 || rep.TotalTokensPerS <= rep.OutputTokensPerS {
				t.Errorf("report: %+v", rep)
			}
		})
	}
}

func TestGaps(t *testing.T) {
	const n, rate = 20001, 50.0
	for _, arrival := range []string{Poisson, Fixed} {
		gaps := Gaps(rand.New(rand.NewPCG(7, 0)), n, rate, arrival)
		if gaps[0] != 0 {
			t.Errorf("%s: the first request waits %v", arrival, gaps[0])
		}
		var sum, sq float64
		for _, g := range gaps[1:] {
			s := g.Seconds()
			sum += s
			sq += s * s
		}
		mean := sum / (n - 1)
		sd := math.Sqrt(sq/(n-1) - mean*mean)
		// The mean of 20,000 exponential gaps has a relative standard
		// error of 0.7%: 3% is over four of them.
		if math.Abs(mean*rate-1) > 0.03 {
			t.Errorf("%s: mean gap %.5f s, want %.5f", arrival, mean, 1/rate)
		}
		wantSD := 0.0
		if arrival == Poisson {
			wantSD = 1 / rate // an exponential's deviation equals its mean
		}
		if math.Abs(sd-wantSD) > 0.05/rate {
			t.Errorf("%s: gap deviation %.5f s, want %.5f", arrival, sd, wantSD)
		}
	}
	if g := Gaps(rand.New(rand.NewPCG(7, 0)), 5, 0, Poisson); g[4] != 0 {
		t.Errorf("rate 0 waits %v", g)
	}
}

func TestRateBoundsStarts(t *testing.T) {
	base := serveTiny(t, server.Config{}, 0)
	// 6 requests at a fixed 10/s cannot be over before 5 gaps of 100 ms.
	rep, err := Run(t.Context(), Config{URL: base, Model: "lem-tiny", Concurrency: 6, Requests: 6, Rate: 10,
		Arrival: Fixed, PromptTokens: 8, OutputTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 6 || rep.DurationS < 0.5 {
		t.Errorf("completed %d in %.3f s", rep.Completed, rep.DurationS)
	}
}

func TestSharedPrefix(t *testing.T) {
	for _, shared := range []float64{0, 0.25, 0.5, 1} {
		prompts := Prompts(rand.New(rand.NewPCG(3, 0)), 16, 40, shared)
		k := int(math.Round(shared * 40))
		first := strings.Fields(prompts[0])
		differ := false
		for _, p := range prompts {
			w := strings.Fields(p)
			if len(w) != 40 {
				t.Fatalf("%d words, want 40", len(w))
			}
			if strings.Join(w[:k], " ") != strings.Join(first[:k], " ") {
				t.Errorf("shared %g: prefixes of %d words differ", shared, k)
			}
			if strings.Join(w[k:], " ") != strings.Join(first[k:], " ") {
				differ = true
			}
		}
		if differ != (shared < 1) {
			t.Errorf("shared %g: the rest differs between prompts: %v", shared, differ)
		}
	}

	// The server sees the shared prefix: one client in turn, so lem reuses
	// the previous prompt's cache for the common part.
	base := serveTiny(t, server.Config{}, 0)
	rep, err := Run(t.Context(), Config{URL: base, Model: "lem-tiny", Concurrency: 1, Requests: 4,
		PromptTokens: 64, OutputTokens: 2, SharedPrefix: 0.75, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	hits := metric(t, base, "lem_prefix_cache_hit_tokens_total")
	if rep.Completed != 4 || float64(hits) < 3*0.6*rep.PromptTokensMean {
		t.Errorf("%d prefix-cache hit tokens over 3 follow-ups of %.1f prompt tokens, 75%% shared", hits, rep.PromptTokensMean)
	}
}

// hold starts a long generation on the server and returns once its first
// token has come, with the function that ends it.
func hold(t *testing.T, base string) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	body := `{"model":"lem-tiny","stream":true,"max_tokens":1900,"temperature":0,` +
		`"logit_bias":{"0":-100,"2":-100},"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), `"content"`) {
	}
	return func() { cancel(); resp.Body.Close() }
}

func TestTooMany(t *testing.T) {
	base := serveTiny(t, server.Config{MaxQueue: -1}, 1)
	release := hold(t, base)
	rep, err := Run(t.Context(), Config{URL: base, Model: "lem-tiny", Concurrency: 4, Requests: 4,
		PromptTokens: 8, OutputTokens: 4})
	release()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 4 || rep.Errors[ErrTooMany] != 4 || rep.Completed != 0 {
		t.Errorf("want 4 refusals counted as %s, got %+v", ErrTooMany, rep)
	}
}

func TestInterrupt(t *testing.T) {
	base := serveTiny(t, server.Config{}, 1)
	release := hold(t, base)
	defer release()
	ctx, stop := context.WithCancel(t.Context())
	// The model is busy: the run's two requests wait in its queue, and
	// the run is stopped once they do.
	go func() {
		for metric(t, base, "lem_queue_depth") < 2 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		stop()
	}()
	rep, err := Run(ctx, Config{URL: base, Model: "lem-tiny", Concurrency: 2, Requests: 100,
		PromptTokens: 8, OutputTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || rep.Sent != 2 || rep.Errors[ErrInterrupted] != 2 {
		t.Errorf("want 2 requests sent and interrupted, got %+v", rep)
	}
}

func TestBadConfig(t *testing.T) {
	good := Config{URL: "http://127.0.0.1:1", Model: "m", Concurrency: 1, Requests: 1, PromptTokens: 1, OutputTokens: 1}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"url", func(c *Config) { c.URL = "127.0.0.1:36911" }, "want http"},
		{"endpoint", func(c *Config) { c.Endpoint = "embeddings" }, "endpoint"},
		{"arrival", func(c *Config) { c.Arrival = "burst" }, "arrival"},
		{"concurrency", func(c *Config) { c.Concurrency = 0 }, "concurrency"},
		{"requests", func(c *Config) { c.Requests = -1 }, "requests"},
		{"rate", func(c *Config) { c.Rate = math.NaN() }, "rate"},
		{"prompt", func(c *Config) { c.PromptTokens = 0 }, "prompt tokens"},
		{"output", func(c *Config) { c.OutputTokens = 0 }, "output tokens"},
		{"shared", func(c *Config) { c.SharedPrefix = 1.5 }, "shared prefix"},
		{"duration", func(c *Config) { c.Duration = -time.Second }, "negative"},
	} {
		c := good
		tc.edit(&c)
		if _, err := Run(t.Context(), c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
	// Nothing listens on port 1: every request fails to connect.
	rep, err := Run(t.Context(), good)
	if err != nil || rep.Errors[ErrConnect] != 1 {
		t.Errorf("no server: %+v, %v", rep, err)
	}
}

func TestPerToken(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		gaps   []time.Duration
		tokens int
		want   []time.Duration
	}{
		{[]time.Duration{10 * ms, 20 * ms}, 3, []time.Duration{10 * ms, 20 * ms}}, // a token per chunk
		{[]time.Duration{10 * ms, 20 * ms}, 5, []time.Duration{5 * ms, 10 * ms}},  // two per gap
		{[]time.Duration{9 * ms}, 4, []time.Duration{3 * ms}},                     // three in the second chunk
		{[]time.Duration{10 * ms, 20 * ms}, 2, []time.Duration{10 * ms, 20 * ms}}, // usage below the chunks: as counted
		{nil, 7, []time.Duration{}},
	} {
		if got := perToken(tc.gaps, tc.tokens); !slices.Equal(got, tc.want) {
			t.Errorf("perToken(%v, %d) = %v, want %v", tc.gaps, tc.tokens, got, tc.want)
		}
	}
}

// TestStreams runs the generator against servers that stream the way
// other servers do: several tokens per chunk with usage, no usage at all,
// an error object mid-stream, a stream cut before [DONE], and a server
// that answers the completions endpoint only. These stand in for
// llama-server and vLLM, which this machine does not have.
func TestStreams(t *testing.T) {
	chunk := `data: {"choices":[{"index":0,"delta":{"content":"ab"}}]}` + "\n\n"
	usage := `data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":10}}` + "\n\n"
	done := "data: [DONE]\n\n"
	for _, tc := range []struct {
		name       string
		body       string
		completed  int
		tokens     int
		itl        int
		errKind    string
		usageGiven bool
	}{
		{"grouped", strings.Repeat(chunk, 5) + usage + done, 1, 10, 4, "", true},
		{"no usage", ": keep-alive\n\n" + strings.Repeat(chunk, 5) + done, 1, 5, 4, "", false},
		{"error", chunk + `data: {"error":{"message":"boom"}}` + "\n\n", 0, 0, 0, ErrStream, false},
		{"cut", chunk + chunk, 0, 0, 0, ErrDisconnect, false},
		{"not json", "data: {oops\n\n", 0, 0, 0, ErrStream, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer k" {
					http.Error(w, "wrong path or key", http.StatusNotFound)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				for part := range strings.SplitAfterSeq(tc.body, "\n\n") {
					io.WriteString(w, part)
					w.(http.Flusher).Flush()
					time.Sleep(time.Millisecond)
				}
			}))
			defer ts.Close()
			rep, err := Run(t.Context(), Config{URL: ts.URL + "/", Model: "m", APIKey: "k", Concurrency: 1, Requests: 1,
				PromptTokens: 4, OutputTokens: 10})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Completed != tc.completed || rep.OutputTokensTotal != tc.tokens || rep.ITL.N != tc.itl ||
				(tc.errKind != "" && rep.Errors[tc.errKind] != 1) || (tc.completed == 1 && (rep.UsageMissing == 0) != tc.usageGiven) {
				t.Errorf("report: %+v", rep)
			}
		})
	}
}

// TestEmptyTokens runs the generator against a completions stream whose
// tokens render as no text (llama-server's chunks for control tokens): each
// unfinished chunk is a token, the finishing chunk and the usage chunk are
// not.
func TestEmptyTokens(t *testing.T) {
	tok := `data: {"choices":[{"text":"","index":0,"finish_reason":null}]}` + "\n\n"
	end := `data: {"choices":[{"text":"","index":0,"finish_reason":"length"}]}` + "\n\n"
	usage := `data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":5}}` + "\n\n"
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			http.Error(w, "wrong path", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for part := range strings.SplitAfterSeq(strings.Repeat(tok, 5)+end+usage+"data: [DONE]\n\n", "\n\n") {
			io.WriteString(w, part)
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	}))
	defer ts.Close()
	rep, err := Run(t.Context(), Config{URL: ts.URL, Model: "m", Endpoint: Completions, Concurrency: 1, Requests: 1,
		PromptTokens: 4, OutputTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Completed != 1 || rep.TTFT.N != 1 || rep.ITL.N != 4 || rep.OutputTokensTotal != 5 {
		t.Errorf("report: completed %d, TTFT samples %d, ITL samples %d, tokens %d; want 1, 1, 4, 5",
			rep.Completed, rep.TTFT.N, rep.ITL.N, rep.OutputTokensTotal)
	}
}

// Package loadgen drives an OpenAI-compatible server (lem serve,
// llama-server, vLLM, …) with concurrent streaming clients and measures
// what each request sees: time to first token, the latency between tokens
// and the whole request's latency, reported as means and percentiles with
// the throughput of the run (`lem load`).
//
// It is only an HTTP client: it talks to the one base URL it is given,
// follows no redirects and uses no proxy.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Endpoints the generator can drive.
const (
	Chat        = "chat"        // POST /v1/chat/completions, one user message
	Completions = "completions" // POST /v1/completions, a raw prompt
)

// Arrival processes.
const (
	Poisson = "poisson" // exponential gaps with mean 1/Rate
	Fixed   = "fixed"   // gaps of exactly 1/Rate
)

// Config describes a run.
type Config struct {
	URL      string // base URL, e.g. http://127.0.0.1:36911
	Model    string // model id sent with each request ("": the first of GET /v1/models)
	APIKey   string // sent as a bearer token ("": none)
	Endpoint string // Chat or Completions ("": Chat)

	Concurrency int           // most requests in flight at once (≥ 1)
	Requests    int           // requests to send in all (≥ 1)
	Rate        float64       // requests started per second (0: as fast as Concurrency allows)
	Arrival     string        // Poisson or Fixed ("": Poisson); used when Rate > 0
	Duration    time.Duration // no request starts after this long (0: no bound)
	Timeout     time.Duration // bound on one request (0: DefaultTimeout)

	PromptTokens int     // approximate prompt length in tokens (≥ 1)
	OutputTokens int     // max_tokens of each request (≥ 1)
	SharedPrefix float64 // fraction of each prompt common to all requests, in [0, 1]
	Seed         uint64  // seeds the prompts and the arrival gaps

	Client *http.Client // nil: a client made for the run
}

// DefaultTimeout bounds one request when Config.Timeout is 0.
const DefaultTimeout = 5 * time.Minute

// Error kinds counted in Report.Errors.
const (
	ErrTooMany     = "http_429"     // the server refused: too many requests
	ErrTimeout     = "timeout"      // the request passed Config.Timeout
	ErrDisconnect  = "disconnect"   // the stream ended before its end marker
	ErrConnect     = "connect"      // no connection could be made
	ErrStream      = "stream_error" // the stream carried an error object
	ErrInterrupted = "interrupted"  // the run was stopped (Ctrl-C) while it ran
)

// Stats summarises samples in milliseconds.
type Stats struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
}

// Report is what a run measured; lem load --json prints it.
type Report struct {
	URL          string  `json:"url"`
	Endpoint     string  `json:"endpoint"`
	Model        string  `json:"model"`
	Concurrency  int     `json:"concurrency"`
	Requests     int     `json:"requests"` // requests asked for
	Rate         float64 `json:"rate"`     // requests/s asked for (0: unbounded)
	Arrival      string  `json:"arrival"`
	PromptTokens int     `json:"prompt_tokens"` // the target
	OutputTokens int     `json:"output_tokens"` // max_tokens
	SharedPrefix float64 `json:"shared_prefix"`
	Seed         uint64  `json:"seed"`

	DurationS   float64        `json:"duration_s"` // first request sent to last one ended
	Sent        int            `json:"sent"`
	Completed   int            `json:"completed"`
	Failed      int            `json:"failed"`
	Errors      map[string]int `json:"errors,omitempty"` // by kind: http_NNN, timeout, …
	Interrupted bool           `json:"interrupted,omitempty"`

	// Token counts of the completed requests. Prompt tokens are the
	// server's usage.prompt_tokens (0 where no usage came); output tokens
	// are usage.completion_tokens, or the content chunks counted where the
	// server gave no usage (UsageMissing counts those requests).
	PromptTokensTotal int     `json:"prompt_tokens_total"`
	PromptTokensMean  float64 `json:"prompt_tokens_mean"`
	OutputTokensTotal int     `json:"output_tokens_total"`
	UsageMissing      int     `json:"usage_missing,omitempty"`

	RequestsPerS     float64 `json:"requests_per_s"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	TotalTokensPerS  float64 `json:"total_tokens_per_s"`

	TTFT Stats `json:"ttft"` // request sent to first content chunk
	ITL  Stats `json:"itl"`  // between tokens, see Result.ITL
	E2E  Stats `json:"e2e"`  // request sent to stream end

	results []Result // each request's, for tests
}

// Result is one request's measurement.
type Result struct {
	Err          string        // error kind, "" on success
	Detail       string        // the error's text
	TTFT, E2E    time.Duration // to the first content chunk; to the end
	PromptTokens int           // usage.prompt_tokens (0: not reported)
	OutputTokens int           // usage.completion_tokens, else the chunk count
	Chunks       int           // content chunks received
	UsageGiven   bool
	// ITL holds one sample per gap between content chunks. When the
	// server packs several tokens into a chunk (usage.completion_tokens
	// greater than the chunks), each gap is divided by the mean tokens per
	// gap, (OutputTokens-1)/(Chunks-1), so a sample is a time per token.
	ITL []time.Duration
}

// check validates c and fills defaults.
func (c *Config) check() error {
	if c.Endpoint == "" {
		c.Endpoint = Chat
	}
	if c.Arrival == "" {
		c.Arrival = Poisson
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	u, err := url.Parse(c.URL)
	switch {
	case err != nil:
		return fmt.Errorf("load: url %q: %w (want http://host:port)", c.URL, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("load: url %q: want http://host:port or https://…", c.URL)
	case c.Endpoint != Chat && c.Endpoint != Completions:
		return fmt.Errorf("load: endpoint %q: want %s or %s", c.Endpoint, Chat, Completions)
	case c.Arrival != Poisson && c.Arrival != Fixed:
		return fmt.Errorf("load: arrival %q: want %s or %s", c.Arrival, Poisson, Fixed)
	case c.Concurrency < 1:
		return fmt.Errorf("load: concurrency must be at least 1 (got %d)", c.Concurrency)
	case c.Requests < 1:
		return fmt.Errorf("load: requests must be at least 1 (got %d)", c.Requests)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("load: rate must be a finite number ≥ 0 (got %g)", c.Rate)
	case c.PromptTokens < 1:
		return fmt.Errorf("load: prompt tokens must be at least 1 (got %d)", c.PromptTokens)
	case c.OutputTokens < 1:
		return fmt.Errorf("load: output tokens must be at least 1 (got %d)", c.OutputTokens)
	case !(c.SharedPrefix >= 0 && c.SharedPrefix <= 1):
		return fmt.Errorf("load: shared prefix must be a fraction in [0, 1] (got %g)", c.SharedPrefix)
	case c.Duration < 0 || c.Timeout < 0:
		return errors.New("load: duration and timeout must not be negative")
	}
	return nil
}

// Run sends cfg.Requests streaming requests and reports what they saw.
// When ctx ends (Ctrl-C), no further request starts, those in flight are
// cancelled and counted as ErrInterrupted, and the report of what ran is
// returned with Interrupted set.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	base := strings.TrimRight(cfg.URL, "/")
	client := cfg.Client
	if client == nil {
		client = &http.Client{
			Transport: &http.Transport{
				Proxy:               nil, // only the URL given
				DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
				MaxIdleConnsPerHost: cfg.Concurrency,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		defer client.CloseIdleConnections()
	}
	if cfg.Model == "" {
		id, err := firstModel(ctx, client, base, cfg.APIKey)
		if err != nil {
			return nil, fmt.Errorf("load: no --model given and %w", err)
		}
		cfg.Model = id
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6c656d6c6f6164))
	prompts := Prompts(rng, cfg.Requests, cfg.PromptTokens, cfg.SharedPrefix)
	gaps := Gaps(rng, cfg.Requests, cfg.Rate, cfg.Arrival)

	stopCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		stopCtx, cancel = context.WithTimeout(stopCtx, cfg.Duration)
		defer cancel()
	}
	results := make([]Result, 0, cfg.Requests)
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, cfg.Concurrency)
	start := time.Now()
	next := start
	sent := 0
dispatch:
	for i := range cfg.Requests {
		next = next.Add(gaps[i])
		if wait := time.Until(next); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-stopCtx.Done():
				t.Stop()
				break dispatch
			}
		}
		select {
		case slots <- struct{}{}:
		case <-stopCtx.Done():
			break dispatch
		}
		if stopCtx.Err() != nil {
			<-slots
			break
		}
		sent++
		wg.Add(1)
		go func(prompt string) {
			defer wg.Done()
			defer func() { <-slots }()
			r := one(ctx, client, base, &cfg, prompt)
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}(prompts[i])
	}
	wg.Wait()
	elapsed := time.Since(start)
	rep := summarise(&cfg, results, elapsed)
	rep.Sent = sent
	rep.Interrupted = ctx.Err() != nil
	return rep, nil
}

// firstModel asks the server for its models and returns the first id.
func firstModel(ctx context.Context, client *http.Client, base, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET /v1/models: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /v1/models: %s", resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return "", fmt.Errorf("GET /v1/models: %w", err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", errors.New("GET /v1/models lists no model")
	}
	return list.Data[0].ID, nil
}

// body returns the JSON request for prompt. ignore_eos (vLLM,
// llama-server) asks for exactly max_tokens; other servers ignore it.
func body(cfg *Config, prompt string) []byte {
	m := map[string]any{
		"model":          cfg.Model,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
		"max_tokens":     cfg.OutputTokens,
		"ignore_eos":     true,
		"temperature":    0,
	}
	if cfg.Endpoint == Chat {
		m["messages"] = []map[string]string{{"role": "user", "content": prompt}}
	} else {
		m["prompt"] = prompt
	}
	b, _ := json.Marshal(m)
	return b
}

// one sends one request and measures it.
func one(ctx context.Context, client *http.Client, base string, cfg *Config, prompt string) (r Result) {
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	path := "/v1/chat/completions"
	if cfg.Endpoint == Completions {
		path = "/v1/completions"
	}
	fail := func(kind string, err error) Result {
		switch {
		case ctx.Err() != nil:
			kind = ErrInterrupted
		case rctx.Err() != nil:
			kind = ErrTimeout
		}
		r.Err, r.Detail = kind, err.Error()
		return r
	}
	req, err := http.NewRequestWithContext(rctx, "POST", base+path, bytes.NewReader(body(cfg, prompt)))
	if err != nil {
		return fail(ErrConnect, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return fail(ErrConnect, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		kind := fmt.Sprintf("http_%d", resp.StatusCode)
		return fail(kind, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg)))
	}
	var last time.Time
	var gaps []time.Duration
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue // comments (keep-alives), event names, blank lines
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			done = true
			break
		}
		now := time.Now()
		var ch chunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return fail(ErrStream, fmt.Errorf("bad chunk %.200q: %w", data, err))
		}
		if ch.Error != nil {
			return fail(ErrStream, fmt.Errorf("error in stream: %s", ch.Error))
		}
		if ch.Usage != nil {
			r.UsageGiven = true
			r.PromptTokens, r.OutputTokens = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
		}
		if ch.content(cfg.Endpoint == Completions) {
			if r.Chunks == 0 {
				r.TTFT = now.Sub(sent)
			} else {
				gaps = append(gaps, now.Sub(last))
			}
			last = now
			r.Chunks++
		}
	}
	if err := sc.Err(); err != nil {
		return fail(ErrDisconnect, err)
	}
	if !done {
		return fail(ErrDisconnect, errors.New("the stream ended without [DONE]"))
	}
	r.E2E = time.Since(sent)
	if !r.UsageGiven {
		r.OutputTokens = r.Chunks
	}
	r.ITL = perToken(gaps, r.OutputTokens)
	return r
}

// perToken turns the gaps between the chunks of a stream of tokens
// tokens into times per token: each gap divided by the mean tokens per
// gap when the chunks carried more tokens than one each.
func perToken(gaps []time.Duration, tokens int) []time.Duration {
	per := 1.0
	if len(gaps) > 0 && tokens-1 > len(gaps) {
		per = float64(tokens-1) / float64(len(gaps))
	}
	out := make([]time.Duration, len(gaps))
	for i, g := range gaps {
		out[i] = time.Duration(float64(g) / per)
	}
	return out
}

// chunk is what the generator reads of a streamed chunk of either
// endpoint.
type chunk struct {
	Choices []struct {
		Text         string  `json:"text"` // completions
		FinishReason *string `json:"finish_reason"`
		Delta        struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// content reports whether the chunk carries a generated token: text
// (answer or reasoning), or, from the completions endpoint, a choice that
// has not finished even when its text is empty (servers send a chunk per
// token, and a token may render as nothing: llama-server drops control
// tokens, which random-weight models emit often).
func (c *chunk) content(completions bool) bool {
	for _, ch := range c.Choices {
		if ch.Text != "" || ch.Delta.Content != "" || ch.Delta.ReasoningContent != "" || ch.Delta.Reasoning != "" {
			return true
		}
		if completions && ch.FinishReason == nil {
			return true
		}
	}
	return false
}

// summarise builds the report of the results.
func summarise(cfg *Config, results []Result, elapsed time.Duration) *Report {
	rep := &Report{URL: cfg.URL, Endpoint: cfg.Endpoint, Model: cfg.Model, Concurrency: cfg.Concurrency,
		Requests: cfg.Requests, Rate: cfg.Rate, Arrival: cfg.Arrival, PromptTokens: cfg.PromptTokens,
		OutputTokens: cfg.OutputTokens, SharedPrefix: cfg.SharedPrefix, Seed: cfg.Seed,
		DurationS: elapsed.Seconds()}
	var ttft, itl, e2e []time.Duration
	withPrompt := 0
	for _, r := range results {
		if r.Err != "" {
			rep.Failed++
			if rep.Errors == nil {
				rep.Errors = map[string]int{}
			}
			rep.Errors[r.Err]++
			continue
		}
		rep.Completed++
		if r.PromptTokens > 0 {
			withPrompt++
			rep.PromptTokensTotal += r.PromptTokens
		}
		if !r.UsageGiven {
			rep.UsageMissing++
		}
		rep.OutputTokensTotal += r.OutputTokens
		if r.Chunks > 0 {
			ttft = append(ttft, r.TTFT)
		}
		itl = append(itl, r.ITL...)
		e2e = append(e2e, r.E2E)
	}
	if withPrompt > 0 {
		rep.PromptTokensMean = float64(rep.PromptTokensTotal) / float64(withPrompt)
	}
	if s := elapsed.Seconds(); s > 0 {
		rep.RequestsPerS = float64(rep.Completed) / s
		rep.OutputTokensPerS = float64(rep.OutputTokensTotal) / s
		rep.TotalTokensPerS = float64(rep.OutputTokensTotal+rep.PromptTokensTotal) / s
	}
	rep.TTFT, rep.ITL, rep.E2E = Summarise(ttft), Summarise(itl), Summarise(e2e)
	rep.results = results
	return rep
}

// Summarise returns the mean and the 50th, 90th and 99th percentiles of
// the samples in milliseconds, percentiles interpolated linearly between
// the closest ranks.
func Summarise(samples []time.Duration) Stats {
	if len(samples) == 0 {
		return Stats{}
	}
	ms := make([]float64, len(samples))
	sum := 0.0
	for i, d := range samples {
		ms[i] = float64(d) / float64(time.Millisecond)
		sum += ms[i]
	}
	slices.Sort(ms)
	return Stats{N: len(ms), Mean: sum / float64(len(ms)),
		P50: Percentile(ms, 50), P90: Percentile(ms, 90), P99: Percentile(ms, 99)}
}

// Percentile returns the p-th percentile (0–100) of sorted values,
// interpolating linearly between the closest ranks.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// newParallelServer serves the chat model as "chat" with the model
// options (Parallel, KVBytes) on a loopback port.
func newParallelServer(t *testing.T, cfg Config, opts ModelOptions) (*Model, *httptest.Server) {
	t.Helper()
	m, err := NewModel("chat", openChatModel(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); ts.Close() })
	return m, ts
}

// metricValue returns the value of the series (name and labels, as
// /metrics prints them) on the server's /metrics, failing when absent.
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(string(data))
	if m == nil {
		t.Fatalf("/metrics lacks %s", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

// streamChat sends a streaming chat request and returns the content it
// streamed, the finish reasons by choice and whether it ended with
// [DONE].
func streamChat(ctx context.Context, url, body string) (content map[int]string, finish map[int]string, done bool, err error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, nil, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		return nil, nil, false, fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	content, finish = map[int]string{}, map[int]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if d == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				Finish *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(d), &chunk); err != nil {
			return nil, nil, false, fmt.Errorf("chunk %q: %w", d, err)
		}
		for _, c := range chunk.Choices {
			content[c.Index] += c.Delta.Content
			if c.Finish != nil {
				if _, twice := finish[c.Index]; twice {
					return nil, nil, false, fmt.Errorf("choice %d finished twice", c.Index)
				}
				finish[c.Index] = *c.Finish
			}
		}
	}
	return content, finish, done, sc.Err()
}

// chatBody is a greedy streamed chat request of the user's text, at most
// maxTokens tokens, thinking off.
func chatBody(text string, maxTokens, n int) string {
	return fmt.Sprintf(`{"model":"chat","stream":true,"temperature":0,"max_tokens":%d,"n":%d,`+
		`"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":%s}]}`, maxTokens, n, mustJSON(text))
}

// watchRunning polls the scheduler until stop is closed and returns the
// most sequences it saw running at once.
func watchRunning(m *Model, stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		most := 0
		for {
			most = max(most, m.sched.Stats().Running)
			select {
			case <-stop:
				out <- most
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	return out
}

// TestParallelStreams runs eight streaming clients at once on a model
// that runs four sequences at a time: every stream is complete, and each
// greedy reply is the one its request gets alone.
func TestParallelStreams(t *testing.T) {
	m, ts := newParallelServer(t, Config{}, ModelOptions{Parallel: 4})
	if got := m.Parallel(); got != 4 {
		t.Fatalf("Parallel() = %d, want 4", got)
	}
	questions := []string{
		"What is the capital of Japan?",
		"Name three colours.",
		"What is two plus two?",
		"Write a short greeting for a friend who has just moved to a new city far away from home.",
		"Who wrote Hamlet?",
		"What is the largest ocean on Earth?",
		"Say hello.",
		"List the days of the week, starting with Monday, and say which of them come at the weekend.",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alone := make([]string, len(questions))
	for i, q := range questions {
		content, finish, done, err := streamChat(ctx, ts.URL, chatBody(q, 24, 1))
		if err != nil || !done || finish[0] == "" {
			t.Fatalf("alone %d: done %v finish %q: %v", i, done, finish[0], err)
		}
		alone[i] = content[0]
	}

	stop := make(chan struct{})
	most := watchRunning(m, stop)
	var wg sync.WaitGroup
	together := make([]string, len(questions))
	for i, q := range questions {
		wg.Go(func() {
			content, finish, done, err := streamChat(ctx, ts.URL, chatBody(q, 24, 1))
			switch {
			case err != nil:
				t.Errorf("client %d: %v", i, err)
			case !done || finish[0] == "":
				t.Errorf("client %d: incomplete stream (done %v, finish %q): %q", i, done, finish[0], content[0])
			}
			together[i] = content[0]
		})
	}
	wg.Wait()
	close(stop)
	for i := range questions {
		if together[i] != alone[i] {
			t.Errorf("client %d under concurrency: %q; alone: %q", i, together[i], alone[i])
		}
	}
	if n := <-most; n < 2 || n > 4 {
		t.Errorf("at most %d sequences ran at once, want 2 to 4", n)
	}
	// The scheduler retires a finished sequence on its next turn, just
	// after the reply has gone out.
	waitMetric(t, ts.URL, `lem_sequences_running{model="chat"}`, 0)
}

// TestParallelChoices asks for three choices in one request: they run
// in the batch together, and each greedy choice is the reply of n = 1.
func TestParallelChoices(t *testing.T) {
	m, ts := newParallelServer(t, Config{}, ModelOptions{Parallel: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q := "Name three colours."
	one, _, _, err := streamChat(ctx, ts.URL, chatBody(q, 20, 1))
	if err != nil {
		t.Fatal(err)
	}
	content, finish, done, err := streamChat(ctx, ts.URL, chatBody(q, 20, 3))
	if err != nil || !done {
		t.Fatalf("n=3: done %v: %v", done, err)
	}
	for i := range 3 {
		if finish[i] == "" || content[i] != one[0] {
			t.Errorf("choice %d: %q (finish %q), want %q", i, content[i], finish[i], one[0])
		}
	}
	if len(content) != 3 {
		t.Errorf("choices %v, want 0, 1 and 2", content)
	}
	// Choices long enough to be seen running: together.
	stop := make(chan struct{})
	most := watchRunning(m, stop)
	long := strings.Replace(chatBody(q, 64, 3), `"stream":true,`, `"stream":true,"ignore_eos":true,`, 1)
	_, _, done, err = streamChat(ctx, ts.URL, long)
	close(stop)
	if err != nil || !done {
		t.Fatalf("n=3, 64 tokens: done %v: %v", done, err)
	}
	if n := <-most; n < 2 {
		t.Errorf("at most %d sequences ran at once, want the choices together", n)
	}

	// Not streamed, sampled with a seed: three complete choices, the
	// usage counting the tokens of all.
	code, v, raw := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat","n":3,"seed":7,"temperature":1,"max_tokens":12,`+
		`"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"Tell me a story."}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	choices := v["choices"].([]any)
	if len(choices) != 3 {
		t.Fatalf("%d choices: %s", len(choices), raw)
	}
	for i, c := range choices {
		c := c.(map[string]any)
		if c["index"] != float64(i) || c["finish_reason"] == nil {
			t.Errorf("choice %d: %v", i, c)
		}
	}
	// Each choice stopped at its limit or a stop token: usage adds them.
	sum := v["usage"].(map[string]any)["completion_tokens"].(float64)
	if sum < 3 || sum > 36 {
		t.Errorf("completion_tokens %v for three choices of at most 12", sum)
	}
}

// longBody is a streamed request that cannot end early: the end-of-turn
// token is banned.
func longBody(tokens int) string { return strings.Replace(longStream, "%d", strconv.Itoa(tokens), 1) }

// startLong starts a long stream and returns once its first content
// chunk has come, with the function that drops the connection.
func startLong(t *testing.T, url string) (leave func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(longBody(2000)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("long stream: status %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("long stream: %v", err)
		}
		if strings.Contains(line, `"delta"`) {
			break
		}
	}
	return func() { cancel(); resp.Body.Close() }
}

// waitMetric polls /metrics until the series has the value.
func waitMetric(t *testing.T, url, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v := metricValue(t, url, series)
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %v", series, v, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestParallelQueueFull fills both slots of a model with real streams
// and its waiting room of one: the next request gets 429 with a
// Retry-After. Clients that leave free their slots: no sequence is left
// running, and the waiting request is served.
func TestParallelQueueFull(t *testing.T) {
	_, ts := newParallelServer(t, Config{MaxQueue: 1, KeepAlive: 10 * time.Millisecond}, ModelOptions{Parallel: 2})
	leaveA := startLong(t, ts.URL)
	leaveB := startLong(t, ts.URL)
	defer leaveA()
	defer leaveB()
	waitMetric(t, ts.URL, `lem_sequences_running{model="chat"}`, 2)

	// A third request waits: its headers and keep-alives come at once.
	type reply struct {
		content string
		done    bool
		err     error
	}
	queued := make(chan reply, 1)
	go func() {
		content, _, done, err := streamChat(context.Background(), ts.URL, chatBody("What is the capital of Japan?", 12, 1))
		queued <- reply{content[0], done, err}
	}()
	waitMetric(t, ts.URL, `lem_queue_depth{model="chat"}`, 1)

	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("Hi", 4, 1)))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(data), CodeQueueFull) {
		t.Fatalf("with 2 running and 1 waiting: status %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), data)
	}

	// A's client leaves: its slot goes to the waiting request, which
	// completes while B still streams.
	leaveA()
	select {
	case r := <-queued:
		if r.err != nil || !r.done || r.content == "" {
			t.Fatalf("the queued request: %q done %v: %v", r.content, r.done, r.err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the queued request was not served after a client left")
	}
	// The queued request's last event can reach its client just before
	// its sequence leaves the scheduler.
	waitMetric(t, ts.URL, `lem_sequences_running{model="chat"}`, 1)
	leaveB()
	waitMetric(t, ts.URL, `lem_sequences_running{model="chat"}`, 0)
	waitMetric(t, ts.URL, `lem_kv_blocks_used{model="chat"}`, 0)
}

// TestParallelMetrics checks the scheduler's series on /metrics after
// requests, and that two requests sharing a long prefix count the second
// one's reuse as prefix-cache hits and in its usage.
func TestParallelMetrics(t *testing.T) {
	_, ts := newParallelServer(t, Config{}, ModelOptions{Parallel: 3})
	series := func(name string) float64 { return metricValue(t, ts.URL, name+`{model="chat"}`) }
	if v := series("lem_sequences_parallel"); v != 3 {
		t.Errorf("lem_sequences_parallel %v, want 3", v)
	}
	total := series("lem_kv_blocks_total")
	if total < 3 {
		t.Errorf("lem_kv_blocks_total %v", total)
	}
	for _, name := range []string{"lem_sequences_running", "lem_sequences_waiting", "lem_kv_blocks_used",
		"lem_prefix_cache_hit_tokens_total", "lem_sequence_prompt_tokens_total", "lem_preemptions_total"} {
		if v := series(name); v != 0 {
			t.Errorf("%s %v before any request", name, v)
		}
	}

	system := strings.Repeat("You are a careful assistant who answers briefly and checks every fact twice. ", 12)
	ask := func(question string) map[string]any {
		t.Helper()
		code, v, raw := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat","temperature":0,"max_tokens":4,`+
			`"messages":[{"role":"system","content":`+mustJSON(system)+`},{"role":"user","content":`+mustJSON(question)+`}]}`)
		if code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		return v["usage"].(map[string]any)
	}
	first := ask("What is the capital of Japan?")
	hits := series("lem_prefix_cache_hit_tokens_total")
	second := ask("What is the capital of France?")
	prompt := second["prompt_tokens"].(float64)
	cached := second["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	gained := series("lem_prefix_cache_hit_tokens_total") - hits
	t.Logf("prompt %v tokens, %v cached; first request %v cached", prompt, cached, first["prompt_tokens_details"])
	if prompt < 150 || cached < prompt/2 || cached >= prompt {
		t.Errorf("the second request reused %v of its %v prompt tokens, want most of the shared system prompt", cached, prompt)
	}
	if gained != cached {
		t.Errorf("lem_prefix_cache_hit_tokens_total grew by %v, the usage says %v cached", gained, cached)
	}
	if got, want := series("lem_sequence_prompt_tokens_total"), first["prompt_tokens"].(float64)+prompt; got != want {
		t.Errorf("lem_sequence_prompt_tokens_total %v, want %v", got, want)
	}
	waitMetric(t, ts.URL, `lem_sequences_running{model="chat"}`, 0)
	used := series("lem_kv_blocks_used")
	if series("lem_sequences_running") != 0 || used != 0 || series("lem_kv_blocks_total") != total {
		t.Errorf("after the requests: running %v, blocks used %v of %v", series("lem_sequences_running"), used, series("lem_kv_blocks_total"))
	}
}

// TestParallelDrafts checks speculative decoding through the server: the
// replies are those of a server without drafts, streamed and not, and
// /metrics counts the drafts run and accepted (the chat model's thinking
// repeats words of the question, which prompt lookup guesses).
func TestParallelDrafts(t *testing.T) {
	_, plain := newParallelServer(t, Config{}, ModelOptions{Parallel: 2, Draft: -1})
	_, drafts := newParallelServer(t, Config{}, ModelOptions{Parallel: 2})
	for _, q := range []string{"What is the capital of Japan?", "What is 17 plus 25?", "Reverse the words: red green blue yellow",
		"Hello! What is the capital of France? And what is the capital of Italy?"} {
		body := `{"model":"chat","temperature":0,"max_tokens":96,"messages":[{"role":"user","content":` + mustJSON(q) + `}]}`
		_, want, raw := post(t, plain.URL+"/v1/chat/completions", body)
		_, got, raw2 := post(t, drafts.URL+"/v1/chat/completions", body)
		if msg := func(v map[string]any) any { return v["choices"].([]any)[0].(map[string]any)["message"] }; !reflect.DeepEqual(msg(got), msg(want)) {
			t.Errorf("%q with drafts: %s\nwithout: %s", q, raw2, raw)
		}
		content, _, done, err := streamChat(t.Context(), drafts.URL, strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
		if err != nil || !done {
			t.Fatalf("%q streamed: done %v: %v", q, done, err)
		}
		m := want["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		if content[0] != m["content"] {
			t.Errorf("%q streamed with drafts: %q, want %q", q, content[0], m["content"])
		}
	}
	run := metricValue(t, drafts.URL, `lem_draft_tokens_total{model="chat"}`)
	accepted := metricValue(t, drafts.URL, `lem_draft_accepted_tokens_total{model="chat"}`)
	t.Logf("drafts run %v, accepted %v", run, accepted)
	if accepted == 0 || accepted > run {
		t.Errorf("drafts run %v, accepted %v", run, accepted)
	}
	if v := metricValue(t, plain.URL, `lem_draft_tokens_total{model="chat"}`); v != 0 {
		t.Errorf("--draft -1 ran %v drafts", v)
	}
}

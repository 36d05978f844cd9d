package compat

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/lem-engine/lem/server"
)

// Timings of the queued-stream tests: the server sends a keep-alive
// every keepAlive, the clients give up after idle without a byte, and
// the queued request waits well past that.
const (
	keepAlive = 50 * time.Millisecond
	idle      = 400 * time.Millisecond
	waitFor   = 3 * idle
)

// idleClient returns an HTTP client whose requests fail when the server
// sends nothing for idle, as the read timeout of an SDK's HTTP stack
// (httpx's, Node's) does: each read of the connection, the headers'
// included, has that long.
func idleClient(idle time.Duration) *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, idle: idle}, nil
		},
	}}
}

type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	c.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(b)
}

// holdModel starts a streamed request that holds the model until the
// returned function is called: it asks for far more output (16 choices
// of 2,000 tokens, 20 alternatives each) than the stream's buffers take
// while its body goes unread, so that its generation waits on the
// client.
func holdModel(t *testing.T, base string) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"model":"chat-model","messages":[{"role":"user","content":"Hello!"}],"stream":true,"max_tokens":2000,` +
		`"n":16,"logprobs":true,"top_logprobs":20,"logit_bias":{"2":-100}}`
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		t.Fatalf("the holding request: status %d", resp.StatusCode)
	}
	return func() {
		cancel()
		resp.Body.Close()
	}
}

// queuedBehind runs call, a streamed request through an SDK whose HTTP
// client gives up after idle without a byte, while another request holds
// the model for several times idle. call must succeed once the model is
// free.
func queuedBehind(t *testing.T, base string, call func() error) {
	t.Helper()
	release := holdModel(t, base)
	defer release()
	done := make(chan error, 1)
	go func() { done <- call() }()
	deadline := time.Now().Add(30 * time.Second)
	for queueDepth(t, base) != 1 {
		select {
		case err := <-done:
			t.Fatalf("the request ended before it queued: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the request never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(waitFor) // the wait the client must sit through
	select {
	case err := <-done:
		t.Fatalf("the queued request ended while it waited %v with a %v read timeout: %v", waitFor, idle, err)
	default:
	}
	if queueDepth(t, base) != 1 {
		t.Fatal("the request did not wait behind the one holding the model")
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("queued %v with a %v read timeout: %v", waitFor, idle, err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the queued request did not finish")
	}
}

func TestQueuedOpenAIStream(t *testing.T) {
	base, _ := startOneAtATime(t, server.Config{KeepAlive: keepAlive})
	client := newClient(base, option.WithHTTPClient(idleClient(idle)))
	ctx := context.Background()
	t.Run("chat", func(t *testing.T) {
		queuedBehind(t, base, func() error {
			stream := client.Chat.Completions.NewStreaming(ctx, greedy(openai.UserMessage(japan)), noThinking)
			var content strings.Builder
			for stream.Next() {
				if ch := stream.Current(); len(ch.Choices) > 0 {
					content.WriteString(ch.Choices[0].Delta.Content)
				}
			}
			if err := stream.Err(); err != nil {
				return err
			}
			if content.String() != tokyo {
				t.Errorf("content %q", content.String())
			}
			return nil
		})
	})
	t.Run("responses", func(t *testing.T) {
		queuedBehind(t, base, func() error {
			stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
				Model: "chat-model", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(japan)},
				Temperature: openai.Float(0),
			}, noThinking)
			var text string
			for stream.Next() {
				if ev := stream.Current(); ev.Type == "response.completed" {
					text = ev.Response.OutputText()
				}
			}
			if err := stream.Err(); err != nil {
				return err
			}
			if text != tokyo {
				t.Errorf("output %q", text)
			}
			return nil
		})
	})
}

func TestQueuedAnthropicStream(t *testing.T) {
	base, _ := startOneAtATime(t, server.Config{KeepAlive: keepAlive})
	client := newAnthropic(base, aopt.WithHTTPClient(idleClient(idle)))
	queuedBehind(t, base, func() error {
		stream := client.Messages.NewStreaming(context.Background(), anGreedy(anUser(japan)))
		var msg anthropic.Message
		for stream.Next() {
			if err := msg.Accumulate(stream.Current()); err != nil {
				return err
			}
		}
		if err := stream.Err(); err != nil {
			return err
		}
		if got := anText(&msg); got != tokyo {
			t.Errorf("content %q", got)
		}
		return nil
	})
}

func TestQueuedOllamaStream(t *testing.T) {
	base, _ := startOneAtATime(t, server.Config{KeepAlive: keepAlive})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	client := api.NewClient(u, idleClient(idle))
	queuedBehind(t, base, func() error {
		var content strings.Builder
		var last api.ChatResponse
		err := client.Chat(context.Background(), &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser(japan)},
			Options: olGreedy(), Think: olThink(false)}, func(r api.ChatResponse) error {
			content.WriteString(r.Message.Content)
			last = r
			return nil
		})
		if err != nil {
			return err
		}
		if content.String() != tokyo || !last.Done {
			t.Errorf("content %q, done %v", content.String(), last.Done)
		}
		return nil
	})
}

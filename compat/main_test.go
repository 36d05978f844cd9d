package compat

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/server"
	"github.com/lem-engine/lem/tiny"
)

var (
	modelOnce sync.Once
	model     *engine.Model
	modelErr  error

	tinyOnce sync.Once
	tinyM    *engine.Model
	tinyErr  error
)

// chatModel loads the chat-model fixture once.
func chatModel(t *testing.T) *engine.Model {
	t.Helper()
	dir := fixtures.Dir(t, "chat-model")
	modelOnce.Do(func() { model, modelErr = engine.Open(dir, engine.Options{Backend: cpu.New(0)}) })
	if modelErr != nil {
		t.Fatal(modelErr)
	}
	return model
}

// tinyModel loads lem-tiny, the model built into lem, once. Its weights and
// tokenizer are the chat-model fixture's, byte for byte, under lem's own
// chat template. The other tests serve the fixture directory as
// "chat-model"; TestOllamaTinyModel checks that lem-tiny lists with the
// size and digest of its embedded weights.
func tinyModel(t *testing.T) *engine.Model {
	t.Helper()
	tinyOnce.Do(func() { tinyM, tinyErr = engine.OpenTiny(engine.Options{Backend: cpu.New(0)}) })
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyM
}

// startServer runs the real server, serving the chat model as "chat-model",
// on a loopback port until the test ends. It returns the base URL.
func startServer(t *testing.T, cfg server.Config) (string, *server.Server) {
	t.Helper()
	return serve(t, cfg, "chat-model", chatModel(t), server.ModelOptions{})
}

// startOneAtATime is startServer with one sequence running at a time
// (lem serve --parallel 1), for tests of requests that wait in the queue.
func startOneAtATime(t *testing.T, cfg server.Config) (string, *server.Server) {
	t.Helper()
	return serve(t, cfg, "chat-model", chatModel(t), server.ModelOptions{Parallel: 1})
}

// startTinyServer runs the real server serving lem-tiny as tiny.Name, as
// `lem serve` with no model does.
func startTinyServer(t *testing.T, cfg server.Config) (string, *server.Server) {
	t.Helper()
	return serve(t, cfg, tiny.Name, tinyModel(t), server.ModelOptions{})
}

// serve runs the real server, serving eng as id with opts, on a loopback
// port until the test ends. It returns the base URL.
func serve(t *testing.T, cfg server.Config, id string, eng *engine.Model, opts server.ModelOptions) (string, *server.Server) {
	t.Helper()
	m, err := server.NewModel(id, eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := server.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), s
}

// newClient returns an SDK client of the server at base.
func newClient(base string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(base + "/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
	}, opts...)...)
}

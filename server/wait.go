package server

import (
	"context"
	"time"
)

// Waiting in the queue. A request that has to wait for its model is told
// so through its emit function: EventQueued once it holds its place,
// then EventKeepAlive every Config.KeepAlive until its turn. Streaming
// adapters answer both with stream.wait, giving the frame their clients
// ignore:
//
//   - OpenAI (chat, completions, responses): an SSE comment line, which
//     the SSE format says to ignore and the SDKs skip.
//   - Anthropic: a ping event, which the Messages API itself sends and
//     the official SDKs skip by design.
//   - Ollama: a chunk with empty content and "done": false. An empty line
//     would not do: the official Go client (github.com/ollama/ollama/api)
//     and the Python client decode every line as JSON and fail on an
//     empty one; an empty chunk appends nothing to the reply.
//
// Errors after the headers went out (the client left, the server shut
// down) are reported in-stream, as after EventStart.

// DefaultKeepAlive is the default of Config.KeepAlive: well within the
// read timeouts of clients (tens of seconds at least).
const DefaultKeepAlive = 5 * time.Second

// sseKeepAlive is the keep-alive frame of the OpenAI streams.
var sseKeepAlive = []byte(": keep-alive\n\n")

// anPing is the keep-alive frame of Anthropic streams.
var anPing = []byte("event: ping\ndata: {\"type\":\"ping\"}\n\n")

// wait takes the request's turn in the model's queue, emitting
// EventQueued and EventKeepAlive while it waits when emit is set, and
// records the time spent waiting.
func (m *Model) wait(ctx context.Context, emit func(Event) error) error {
	start := time.Now()
	var err error
	if emit == nil {
		err = m.q.acquire(ctx)
	} else {
		interval := m.srv.cfg.KeepAlive
		if interval == 0 {
			interval = DefaultKeepAlive
		}
		queued := false
		err = m.q.acquireWaiting(ctx, interval, func() error {
			kind := EventKeepAlive
			if !queued {
				kind, queued = EventQueued, true
			}
			return emit(Event{Kind: kind})
		})
	}
	if e, ok := err.(*Error); ok && (e.Code == CodeQueueFull || e.Code == CodeUnavailable) {
		return err // refused: it never waited
	}
	m.obs.queueWait.Observe(time.Since(start).Seconds())
	return err
}

// wait answers the events of a request waiting in the queue:
// EventQueued sends the status and headers, EventKeepAlive writes
// keepAlive, a frame the dialect's clients ignore. Other events are left
// to the caller.
func (s *stream) wait(ev Event, contentType string, keepAlive []byte) error {
	switch ev.Kind {
	case EventQueued:
		return s.start(contentType)
	case EventKeepAlive:
		return s.write(keepAlive)
	}
	return nil
}

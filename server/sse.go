package server

import (
	"net/http"
	"sync"
	"time"
	"unicode/utf8"
)

// stream writes a streamed response: server-sent events (OpenAI,
// Anthropic) or newline-delimited JSON (Ollama). Frames are queued by the
// generating goroutine and written by a writer goroutine of the stream, so
// that generation never waits on the network: each write is given its own
// deadline and flushed at once, frames that piled up meanwhile going out
// together. A write error is returned by the next call to write, which
// stops generation. The handler must call close before it returns.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	// buf is a scratch buffer dialects encode frames into.
	buf []byte

	mu      sync.Mutex
	cond    sync.Cond // signalled when the writer drains pending or fails
	pending []byte    // frames queued, not yet handed to the writer
	spare   []byte    // the writer's last buffer, for reuse
	err     error
	closing bool
	kick    chan struct{}
	done    chan struct{}
}

// maxPending bounds the bytes queued for a slow client; write then waits.
const maxPending = 1 << 20

func newStream(w http.ResponseWriter) *stream {
	s := &stream{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 512),
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	s.cond.L = &s.mu
	return s
}

// start sends the status and headers and starts the writer.
func (s *stream) start(contentType string) error {
	if s.started {
		return nil
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	if err := s.flush(); err != nil {
		s.err = err
		close(s.done)
		return err
	}
	go s.writer()
	return nil
}

// write queues one frame (copied: the caller may reuse it).
func (s *stream) write(frame []byte) error {
	s.mu.Lock()
	if !s.started || s.closing {
		s.mu.Unlock()
		return http.ErrHandlerTimeout
	}
	for s.err == nil && len(s.pending) > maxPending {
		s.cond.Wait()
	}
	if s.err != nil {
		s.mu.Unlock()
		return s.err
	}
	s.pending = append(s.pending, frame...)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// close writes what is queued and stops the writer.
func (s *stream) close() error {
	if !s.started {
		return nil
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.done
		return s.err
	}
	s.closing = true
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	<-s.done
	return s.err
}

func (s *stream) writer() {
	defer close(s.done)
	for range s.kick {
		s.mu.Lock()
		buf := s.pending
		s.pending = s.spare[:0]
		closing := s.closing
		s.mu.Unlock()
		var err error
		if len(buf) > 0 {
			s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
			if _, err = s.w.Write(buf); err == nil {
				err = s.flush()
			}
		}
		s.mu.Lock()
		s.spare = buf[:0]
		if err != nil && s.err == nil {
			s.err = err
		}
		s.cond.Broadcast()
		more := len(s.pending) > 0
		s.mu.Unlock()
		if err != nil || closing && !more {
			return
		}
		if more || closing {
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
	}
}

func (s *stream) flush() error {
	err := s.rc.Flush()
	if err == http.ErrNotSupported {
		return nil
	}
	return err
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD; U+2028 and U+2029 are escaped as encoding/json does.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

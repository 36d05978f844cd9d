package server

import (
	"net/http"
	"time"
	"unicode/utf8"
)

// stream writes a streamed response: server-sent events (OpenAI,
// Anthropic) or newline-delimited JSON (Ollama). Each frame is written
// with its own write deadline and flushed at once.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	// buf is a scratch buffer dialects encode frames into.
	buf []byte
}

func newStream(w http.ResponseWriter) *stream {
	return &stream{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 512)}
}

// start sends the status and headers.
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
	return s.flush()
}

// write sends one frame.
func (s *stream) write(frame []byte) error {
	s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := s.w.Write(frame); err != nil {
		return err
	}
	return s.flush()
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

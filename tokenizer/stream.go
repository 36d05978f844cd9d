package tokenizer

import "strings"

// Stream turns ids into text one id at a time, as a model generates them.
// Next returns only text that later ids cannot change: it holds back an
// incomplete UTF-8 character and a byte-fallback sequence that may still
// grow. The concatenation of everything Next and Flush return equals
// Decode of all the ids.
//
// A Stream is not safe for concurrent use; make one per sequence.
type Stream struct {
	t *Tokenizer
	// SkipSpecial leaves special tokens out, as Decode(ids, true) does.
	// Set it before the first Next.
	SkipSpecial bool

	ids []int32
	// ids[prefix:read] were already emitted and are kept as context, so
	// that decoders that treat the start of the text specially (stripping a
	// leading space) see the same text on both sides of the subtraction.
	prefix, read int
}

// NewStream returns a streaming decoder that keeps special tokens as text.
func (t *Tokenizer) NewStream() *Stream {
	return &Stream{t: t}
}

// Next adds one id and returns the text it completes, possibly "".
func (s *Stream) Next(id int32) string {
	s.ids = append(s.ids, id)
	if s.t.byteFallbackDecode && s.t.isByteToken(id) {
		// A following byte token joins this one's group, and the group
		// decodes as a whole: wait for its end.
		return ""
	}
	return s.emit(false)
}

// Flush returns the text held back and resets the stream.
func (s *Stream) Flush() string {
	out := s.emit(true)
	s.ids, s.prefix, s.read = s.ids[:0], 0, 0
	return out
}

func (s *Stream) emit(final bool) string {
	prefixText := s.t.Decode(s.ids[s.prefix:s.read], s.SkipSpecial)
	text := s.t.Decode(s.ids[s.prefix:], s.SkipSpecial)
	if !final && (len(text) <= len(prefixText) || !strings.HasPrefix(text, prefixText) || strings.HasSuffix(text, "\uFFFD")) {
		return ""
	}
	// At the end, return what follows the part already emitted. (The
	// decoders keep the emitted text a prefix; should one not, the common
	// part is the best guess.)
	n := 0
	for n < len(prefixText) && n < len(text) && prefixText[n] == text[n] {
		n++
	}
	delta := text[n:]
	// Keep only the chunk just emitted as context.
	k := copy(s.ids, s.ids[s.read:])
	s.ids = s.ids[:k]
	s.prefix, s.read = 0, k
	return delta
}

func (t *Tokenizer) isByteToken(id int32) bool {
	return id >= 0 && int(id) < len(t.byteTok) && t.byteTok[id]
}

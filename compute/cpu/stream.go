package cpu

import (
	"encoding/binary"
	"unsafe"
)

// streamChunk is the number of bytes a thread reads at a time in
// StreamRead, a multiple of 512.
const streamChunk = 1 << 20

// StreamRead reads every byte of buf once, split over the pool's threads
// (nil for the default pool), as fast as the vector units allow, and
// returns a checksum of its contents so that the reads cannot be elided.
// Timed over a buffer much larger than the caches it measures the memory
// bandwidth that the matrix-vector product should approach.
func StreamRead(buf []byte, pool *Pool) uint64 {
	s := pool.lock()
	defer s.mu.Unlock()
	s.stream = streamTask{buf: buf}
	for _, w := range s.workers {
		w.sum = 0
	}
	s.run(taskStream, (len(buf)+streamChunk-1)/streamChunk)
	var sum uint64
	for _, w := range s.workers {
		sum += w.sum
	}
	s.stream = streamTask{}
	return sum
}

type streamTask struct {
	buf []byte
}

func (t *streamTask) chunk(w *worker, c int) {
	b := t.buf[c*streamChunk : min((c+1)*streamChunk, len(t.buf))]
	var sum uint64
	n := 0
	switch {
	case active >= levelAVX512 && len(b) >= 512:
		n = len(b) &^ 511
		sum = readSumAVX512(unsafe.SliceData(b), n)
	case active >= levelAVX2 && len(b) >= 256:
		n = len(b) &^ 255
		sum = readSumAVX2(unsafe.SliceData(b), n)
	}
	for ; n+8 <= len(b); n += 8 {
		sum += binary.LittleEndian.Uint64(b[n:])
	}
	for ; n < len(b); n++ {
		sum += uint64(b[n])
	}
	w.sum += sum
}

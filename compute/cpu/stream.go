package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/lem-engine/lem/internal/mmap"
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

// MemoryBandwidth implements compute.BandwidthMeter: the streaming-read
// bandwidth over a buffer of size bytes with the backend's threads, the
// best of several passes. The buffer lives in huge-page memory where the
// kernel allows, so that the figure is the fastest the machine reads,
// whichever way the weights were loaded. It raises the process's peak
// resident set by size.
func (b *Backend) MemoryBandwidth(size int64) (float64, error) {
	if size <= 0 || size > math.MaxInt {
		return 0, fmt.Errorf("cpu: memory bandwidth over %d bytes", size)
	}
	buf, err := mmap.Anon(int(size))
	if err != nil {
		return 0, fmt.Errorf("cpu: memory bandwidth buffer: %w", err)
	}
	defer mmap.Free(buf)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = byte(i>>12) | 1 // back every page with memory
	}
	StreamRead(buf, b.pool)
	best := 0.0
	for range 5 {
		t0 := time.Now()
		StreamRead(buf, b.pool)
		if s := time.Since(t0).Seconds(); s > 0 {
			best = max(best, float64(size)/s)
		}
	}
	return best, nil
}

// BandwidthMethod implements compute.BandwidthMeter.
func (b *Backend) BandwidthMethod() string { return "streaming read" }

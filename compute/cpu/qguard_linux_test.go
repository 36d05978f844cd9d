package cpu

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// TestQuantMatMulGuardPage places the weights so that they end where an
// inaccessible page begins: a kernel that reads past the last row faults.
func TestQuantMatMulGuardPage(t *testing.T) {
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 64*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip(err)
	}
	defer syscall.Munmap(mem)
	if err := syscall.Mprotect(mem[63*page:], syscall.PROT_NONE); err != nil {
		t.Skip(err)
	}
	rng := rand.New(rand.NewPCG(41, 42))
	pool := NewPool(2)
	defer pool.Close()
	for _, dt := range append([]compute.DType{compute.BF16}, quantTypes...) {
		for _, sh := range []struct{ n, m, k int }{{1, 5, 256}, {1, 3, 1280}, {5, 7, 768}, {1, 1, 32}} {
			if sh.k%dt.BlockSize() != 0 {
				continue
			}
			var w Weights
			var wv []float64
			if dt.Quantized() {
				w, wv = randQuantWeights(t, rng, dt, sh.m, sh.k, 0, false)
			} else {
				w, wv = randWeights(rng, dt, sh.m, sh.k, 0)
			}
			end := 63 * page
			data := mem[end-len(w.Data) : end]
			copy(data, w.Data)
			w.Data = data
			x := randVec(rng, sh.n*sh.k)
			for _, l := range levels() {
				t.Run(fmt.Sprintf("%s/%s/n=%d,m=%d,k=%d", l, dt, sh.n, sh.m, sh.k), func(t *testing.T) {
					dst := make([]float32, sh.n*sh.m)
					atLevel(t, l, func() { MatMul(dst, x, sh.n, w, pool) })
					if dt.Quantized() {
						checkQuantMatMul(t, dst, x, wv, sh.n, sh.m, sh.k, dt)
					} else {
						checkMatMul(t, dst, x, wv, sh.n, sh.m, sh.k)
					}
				})
			}
		}
	}
}

package cpu

import (
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
)

var _ compute.Experts = (*Backend)(nil)

// moeWork is the scratch of Route and ApplyExperts. It grows to the largest
// shapes used and is then reused, so that a decode step allocates nothing.
type moeWork struct {
	probs []float32 // Route: one row of softmax probabilities

	count []int // ApplyExperts: rows per expert, then start offsets
	order []int // (row, slot) pairs sorted by expert, as row·slots + slot

	xg       []float32 // the rows routed to one expert, gathered
	g, u, gu []float32 // gate and up projections, or both fused
	act, y   []float32 // act(gate) ⊙ up, and the down projection

	// One token: the row blocks of every picked expert's projections, run
	// as one pool call per stage, each block on a pool of its own thread.
	tasks  []expertTask
	pools  []*Pool
	taskFn func(int) // runTask, bound once
}

// expertTask is a block of rows of one expert's projection for one token.
type expertTask struct {
	w      Weights
	x, dst []float32
}

// runTask runs task c on a one-thread pool: the caller's pool is busy
// handing out the tasks.
func (w *moeWork) runTask(c int) {
	t := &w.tasks[c]
	MatMul(t.dst, t.x, 1, t.w, w.pools[c])
}

// taskBytes is the size of the weight blocks one token's projections are
// cut into, so that the threads share the work evenly.
const taskBytes = 512 << 10

// grow returns s with length n, reallocating only when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// weightsOf views a weight tensor as kernel Weights without copying.
func weightsOf(w *compute.Tensor) Weights {
	ws := Weights{DType: w.DType, Rows: w.Rows(), Cols: w.Cols()}
	switch buf := w.Buf.(type) {
	case []byte:
		ws.Data = buf
	case []float32:
		ws = F32Weights(ws.Rows, ws.Cols, buf)
	case *packedWeight:
		ws = buf.weights()
	}
	return ws
}

// Route implements compute.Experts.
func (b *Backend) Route(ids, weights, logits, shared *compute.Tensor, r *compute.Routing) {
	b.note("Route", ids, logits, shared)
	if b.stopped() {
		return
	}
	n, ne, k, slots := logits.Rows(), r.Experts, r.TopK, r.Slots()
	switch {
	case logits.Cols() != ne:
		panic(fmt.Sprintf("cpu: Route: logits have %d columns for %d experts", logits.Cols(), ne))
	case k <= 0 || k > ne:
		panic(fmt.Sprintf("cpu: Route: top %d of %d experts", k, ne))
	case ids.Len() < n*slots || weights.Len() < n*slots:
		panic(fmt.Sprintf("cpu: Route: %d rows of %d slots do not fit ids %v and weights %v", n, slots, ids.Shape, weights.Shape))
	case r.Shared > 0 && shared != nil && shared.Len() < n*r.Shared:
		panic(fmt.Sprintf("cpu: Route: shared gate logits %v for %d rows of %d shared experts", shared.Shape, n, r.Shared))
	}
	ls, is, ws := f32(logits), ids.Buf.([]int32), f32(weights)
	var scale, gates []float32
	if r.ExpertScale != nil {
		scale = f32(b.asF32(r.ExpertScale))
	}
	if shared != nil {
		gates = f32(shared)
	}
	w := &b.moe
	w.probs = grow(w.probs, ne)
	for i := range n {
		row := ls[i*ne : (i+1)*ne]
		id, wt := is[i*slots:i*slots+k], ws[i*slots:i*slots+k]
		switch r.Order {
		case compute.SoftmaxTopK:
			softmax(w.probs, row)
			topK(id, wt, w.probs)
			if r.Normalize {
				var sum float32
				for _, v := range wt {
					sum += v
				}
				for j := range wt {
					wt[j] /= sum
				}
			}
		case compute.TopKSoftmax:
			topK(id, wt, row)
			softmax(wt, wt)
		default:
			panic(fmt.Sprintf("cpu: Route: unknown routing order %d", r.Order))
		}
		if scale != nil {
			for j, e := range id {
				wt[j] *= scale[e]
			}
		}
		for s := range r.Shared {
			is[i*slots+k+s] = int32(ne + s)
			v := float32(1)
			if gates != nil {
				v = sigmoid(gates[i*r.Shared+s])
			}
			ws[i*slots+k+s] = v
		}
	}
}

// softmax writes the softmax of x to dst (which may be x).
func softmax(dst, x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - mx)))
		dst[i] = e
		sum += e
	}
	for i := range dst[:len(x)] {
		dst[i] /= sum
	}
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// topK writes the indices and values of the len(ids) largest values of v
// in decreasing order; among equal values the lower index comes first.
func topK(ids []int32, vals, v []float32) {
	for j := range ids {
		best := -1
		for e, x := range v {
			if (best < 0 || x > v[best]) && !picked(ids[:j], e) {
				best = e
			}
		}
		ids[j], vals[j] = int32(best), v[best]
	}
}

func picked(ids []int32, e int) bool {
	for _, id := range ids {
		if int(id) == e {
			return true
		}
	}
	return false
}

// ApplyExperts implements compute.Experts. The (row, slot) pairs are sorted
// by expert; each expert that any row picked then runs once over all its
// rows, gathered into one matrix, so that its weights are read once per
// call, through the same matrix kernels (and thread pool) as MatMul.
// Experts no row picked are not touched.
func (b *Backend) ApplyExperts(dst, x, ids, weights *compute.Tensor, f *compute.ExpertFFN) {
	b.note("ApplyExperts", dst, x, ids)
	if b.stopped() {
		return
	}
	n, hid, slots := x.Rows(), x.Cols(), ids.Cols()
	ne := len(f.Experts)
	if dst.Rows() != n || dst.Cols() != hid || ids.Rows() != n || weights.Len() != ids.Len() {
		panic(fmt.Sprintf("cpu: ApplyExperts: dst %v, x %v, ids %v, weights %v", dst.Shape, x.Shape, ids.Shape, weights.Shape))
	}
	is, ws, xs, d := ids.Buf.([]int32), f32(weights), f32(x), f32(dst)
	w := &b.moe
	for _, e := range is[:n*slots] {
		if e < 0 || int(e) >= ne {
			panic(fmt.Sprintf("cpu: ApplyExperts: expert %d of %d", e, ne))
		}
	}
	if n == 1 {
		b.tokenExperts(d[:hid], xs[:hid], is[:slots], ws[:slots], f)
		return
	}

	// Counting sort of the pairs by expert.
	w.count = grow(w.count, ne+1)
	clear(w.count)
	for _, e := range is[:n*slots] {
		w.count[e+1]++
	}
	for e := range ne {
		w.count[e+1] += w.count[e]
	}
	w.order = grow(w.order, n*slots)
	for p, e := range is[:n*slots] {
		w.order[w.count[e]] = p
		w.count[e]++
	}
	// count[e] is now the end of expert e's pairs, and so the start of
	// expert e+1's.

	clear(d[:n*hid])
	start := 0
	for e := range ne {
		end := w.count[e]
		pairs := w.order[start:end]
		start = end
		if len(pairs) == 0 {
			continue
		}
		b.runExpert(&f.Experts[e], f, pairs, slots, xs, hid)
		for r, p := range pairs {
			row := p / slots
			Axpy(d[row*hid:(row+1)*hid], ws[p], w.y[r*hid:(r+1)*hid])
		}
	}
}

// runExpert computes one expert's output for the rows of the given pairs
// into b.moe.y, one row per pair.
func (b *Backend) runExpert(ex *compute.Expert, f *compute.ExpertFFN, pairs []int, slots int, xs []float32, hid int) {
	w := &b.moe
	m, inter := len(pairs), ex.Inter()
	w.xg = grow(w.xg, m*hid)
	for r, p := range pairs {
		row := p / slots
		copy(w.xg[r*hid:(r+1)*hid], xs[row*hid:(row+1)*hid])
	}
	var g, u []float32
	stride := inter
	if ex.GateUp != nil {
		w.gu = grow(w.gu, m*2*inter)
		MatMul(w.gu, w.xg, m, weightsOf(ex.GateUp), b.pool)
		g, u, stride = w.gu, w.gu[inter:], 2*inter
	} else {
		w.g, w.u = grow(w.g, m*inter), grow(w.u, m*inter)
		MatMul(w.g, w.xg, m, weightsOf(ex.Gate), b.pool)
		MatMul(w.u, w.xg, m, weightsOf(ex.Up), b.pool)
		g, u = w.g, w.u
	}
	var gb, ub []float32
	if ex.GateUpBias != nil {
		bias := f32(b.asF32(ex.GateUpBias))
		gb, ub = bias[:inter], bias[inter:2*inter]
	}
	w.act = grow(w.act, m*inter)
	for r := range m {
		glu(w.act[r*inter:(r+1)*inter], g[r*stride:], u[r*stride:], gb, ub, f)
	}
	w.y = grow(w.y, m*hid)
	MatMul(w.y, w.act, m, weightsOf(ex.Down), b.pool)
	if ex.DownBias != nil {
		bias := f32(b.asF32(ex.DownBias))
		for r := range m {
			yr := w.y[r*hid : (r+1)*hid]
			for c := range yr {
				yr[c] += bias[c]
			}
		}
	}
}

// glu computes act[c] = act(g[c] + gb[c]) · (u[c] + ub[c]), or gpt-oss's
// clamped variant; the biases may be nil.
func glu(act, g, u, gb, ub []float32, f *compute.ExpertFFN) {
	g, u = g[:len(act)], u[:len(act)]
	for c := range act {
		gv, uv := g[c], u[c]
		if gb != nil {
			gv += gb[c]
			uv += ub[c]
		}
		if f.Limit > 0 {
			gv = min(gv, f.Limit)
			uv = min(max(uv, -f.Limit), f.Limit)
			act[c] = (uv + 1) * gv * sigmoid(f.Alpha*gv)
		} else {
			act[c] = activate(gv, f.Act) * uv
		}
	}
}

// tokenExperts is ApplyExperts for one token. The picked experts' gate and
// up projections are cut into blocks of rows that all threads share in one
// pool call, and so are their down projections, so that a token costs two
// pool calls whatever the number of experts, and no thread idles while
// another finishes a small expert.
func (b *Backend) tokenExperts(d, x []float32, ids []int32, wts []float32, f *compute.ExpertFFN) {
	w := &b.moe
	hid := len(x)
	// Per slot j: gate then up at gu[off[j]:], act at act[aoff[j]:].
	total := 0
	for _, e := range ids {
		total += f.Experts[e].Inter()
	}
	w.gu = grow(w.gu, 2*total)
	w.act = grow(w.act, total)
	w.y = grow(w.y, len(ids)*hid)
	w.tasks = w.tasks[:0]
	off := 0
	for _, e := range ids {
		ex := &f.Experts[e]
		inter := ex.Inter()
		gu := w.gu[2*off : 2*(off+inter)]
		if ex.GateUp != nil {
			w.addTasks(weightsOf(ex.GateUp), x, gu)
		} else {
			w.addTasks(weightsOf(ex.Gate), x, gu[:inter])
			w.addTasks(weightsOf(ex.Up), x, gu[inter:])
		}
		off += inter
	}
	b.runTasks()

	w.tasks = w.tasks[:0]
	off = 0
	for j, e := range ids {
		ex := &f.Experts[e]
		inter := ex.Inter()
		gu, act := w.gu[2*off:2*(off+inter)], w.act[off:off+inter]
		var gb, ub []float32
		if ex.GateUpBias != nil {
			bias := f32(b.asF32(ex.GateUpBias))
			gb, ub = bias[:inter], bias[inter:2*inter]
		}
		glu(act, gu[:inter], gu[inter:], gb, ub, f)
		w.addTasks(weightsOf(ex.Down), act, w.y[j*hid:(j+1)*hid])
		off += inter
	}
	b.runTasks()

	// The weighted sum in the order of many rows' (by expert, then slot),
	// so that a row has the same bits alone as in a batch.
	w.order = grow(w.order, len(ids))
	for j := range ids {
		i := j
		for ; i > 0 && ids[w.order[i-1]] > ids[j]; i-- {
			w.order[i] = w.order[i-1]
		}
		w.order[i] = j
	}
	clear(d)
	for _, j := range w.order {
		y := w.y[j*hid : (j+1)*hid]
		if bias := f.Experts[ids[j]].DownBias; bias != nil {
			for c, v := range f32(b.asF32(bias)) {
				y[c] += v
			}
		}
		Axpy(d, wts[j], y)
	}
}

// addTasks appends the tasks of dst = x·wᵀ for one row x, cut into blocks
// of about taskBytes of weights.
func (w *moeWork) addTasks(ws Weights, x, dst []float32) {
	ws.check()
	rb, _ := ws.DType.RowBytes(ws.Cols)
	rows := max(16, taskBytes/max(rb, 1)) &^ 15
	for lo := 0; lo < ws.Rows; lo += rows {
		hi := min(lo+rows, ws.Rows)
		sub := Weights{DType: ws.DType, Rows: hi - lo, Cols: ws.Cols, Data: ws.Data[lo*rb : hi*rb]}
		if ws.pack != nil {
			// lo is a whole number of packed groups: the rows' groups, and
			// any rows after the last group, are those bytes of the copy.
			sub.pack = ws.pack[lo*rb : hi*rb]
		}
		w.tasks = append(w.tasks, expertTask{w: sub, x: x, dst: dst[lo:hi]})
	}
}

// runTasks runs the queued tasks over the backend's pool.
func (b *Backend) runTasks() {
	w := &b.moe
	for len(w.pools) < len(w.tasks) {
		w.pools = append(w.pools, NewPool(1))
	}
	// The tasks' pools compute as the backend's: row-stable or not.
	s := b.pool.lock()
	stable := s.rowStable
	s.mu.Unlock()
	for _, p := range w.pools[:len(w.tasks)] {
		p.s.rowStable = stable
	}
	if w.taskFn == nil {
		w.taskFn = w.runTask
	}
	b.pool.Run(len(w.tasks), w.taskFn)
	clear(w.tasks) // drop references to the weights and activations
}

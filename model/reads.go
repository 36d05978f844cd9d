package model

import "github.com/lem-engine/lem/compute"

// WeightReads accounts what a loaded model reads of its weights, from the
// tensors its loader fetched and how the architecture uses each: the basis
// of decode bandwidth figures.
type WeightReads struct {
	// Bytes is the stored size of every tensor the model loaded (tensors
	// of the file that the architecture does not use are not counted).
	Bytes int64
	// PerToken is what one decode step reads: every weight once, except
	// lookup tables indexed by token id (the token embedding, Gemma's
	// per-layer embeddings), of which one row, and the routed experts of
	// mixture-of-experts layers, of which the k a token is routed to. An
	// output projection tied to the token embedding reads that table in
	// full as well.
	PerToken int64
	// Experts is the stored size of the routed experts, all of them;
	// ActiveExperts the part of it one token reads. Shared experts and
	// routers count as ordinary weights.
	Experts, ActiveExperts int64
}

// use is how a decode step reads a loaded tensor.
type use uint8

const (
	readAll    use = iota // every byte, once
	readRow               // one row of a lookup table
	readRowAll            // a lookup table that is also the output projection
	readRouted            // routed experts: see route
)

// loggedTensor is a tensor the loader fetched.
type loggedTensor struct {
	bytes int64
	rows  int // the outermost dimension
	use   use
	group int // readRouted: index into readLog.groups
}

// routeGroup is one layer's routed experts: a token reads topK of experts.
type routeGroup struct{ topK, experts int }

// readLog is a Source that records the tensors a loader fetches, so that
// the weights a model reads follow from what it loaded rather than from
// its tensor names.
type readLog struct {
	src     Source
	tensors map[string]*loggedTensor
	order   []string // names in the order first fetched
	groups  []routeGroup

	progress    Progress // nil: none
	done, total int64    // bytes of the tensors fetched, of all
}

func newReadLog(src Source) *readLog {
	return &readLog{src: src, tensors: map[string]*loggedTensor{}}
}

// Lookup implements Source, recording the tensor.
func (r *readLog) Lookup(name string) (Stored, bool) {
	s, ok := r.src.Lookup(name)
	if ok && r.tensors[name] == nil {
		r.report()
		t := &loggedTensor{bytes: int64(len(s.Data))}
		r.done += t.bytes
		if len(s.Shape) > 0 {
			t.rows = s.Shape[0]
		}
		r.tensors[name] = t
		r.order = append(r.order, name)
	}
	return s, ok
}

// reads sums up the log.
func (r *readLog) reads() WeightReads {
	var w WeightReads
	routed := make([]int64, len(r.groups))
	for _, name := range r.order {
		t := r.tensors[name]
		w.Bytes += t.bytes
		switch t.use {
		case readAll:
			w.PerToken += t.bytes
		case readRow, readRowAll:
			if t.rows > 0 {
				w.PerToken += t.bytes / int64(t.rows)
			}
			if t.use == readRowAll {
				w.PerToken += t.bytes
			}
		case readRouted:
			routed[t.group] += t.bytes
		}
	}
	for i, g := range r.groups {
		// Every expert of a layer has the same shape, so the k read are
		// exactly k/E of the layer's expert bytes.
		active := routed[i] * int64(g.topK) / int64(g.experts)
		w.Experts += routed[i]
		w.ActiveExperts += active
		w.PerToken += active
	}
	return w
}

// log returns the loader's read log, or nil when its source keeps none.
func (l *loader) log() *readLog {
	r, _ := l.src.(*readLog)
	return r
}

// mark sets how a decode step reads the logged tensor name.
func (l *loader) mark(name string, u use) {
	if r := l.log(); r != nil {
		if t := r.tensors[name]; t != nil {
			t.use = u
		}
	}
}

// table loads a lookup table indexed by token id (a decode step reads one
// row of it).
func (l *loader) table(name string, shape ...int) *compute.Tensor {
	t := l.weight(name, shape...)
	l.mark(name, readRow)
	return t
}

// output loads the output projection lm_head.weight [vocab, hid], or
// returns the token embedding embed, loaded by table under embedName, when
// the config ties the two or the file has no lm_head.
func (l *loader) output(tie bool, embedName string, embed *compute.Tensor, vocab, hid int) *compute.Tensor {
	if !tie && l.has("lm_head.weight") {
		return l.weight("lm_head.weight", vocab, hid)
	}
	l.mark(embedName, readRowAll)
	return embed
}

// logMark returns a position in the read log, for route.
func (l *loader) logMark() int {
	if r := l.log(); r != nil {
		return len(r.order)
	}
	return 0
}

// route marks the tensors fetched since the log position from as one
// layer's routed experts, of which a token reads topK of experts.
func (l *loader) route(from, topK, experts int) {
	r := l.log()
	if r == nil || experts <= 0 {
		return
	}
	g := len(r.groups)
	r.groups = append(r.groups, routeGroup{topK: topK, experts: experts})
	for _, name := range r.order[from:] {
		t := r.tensors[name]
		t.use, t.group = readRouted, g
	}
}

package model

import "github.com/lem-engine/lem/compute"

// pass is one forward pass over n rows, the one body a family's Forward
// and ForwardBatch share: the backend, the activation arena, the rows'
// tokens and positions, and how the rows reach their keys and values
// (one sequence's caches, or the paged pools of a Cache) and their
// recurrent state (the sequences' row ranges and state tensors).
type pass struct {
	b        compute.Backend
	ar       *arena
	ids, pos *compute.Tensor
	// logits receives the pass's output: for one sequence, the last
	// row's logits [1, vocab] or every row's [n, vocab]; for a batch, the
	// rows the sequences ask for. nil when nobody reads any.
	logits *compute.Tensor

	kv *kvState // one sequence's caches; nil in a batched pass

	cache *Cache // a batched pass's memory
	bt    *Batch
	// pick (I32 [k]) lists the rows whose logits a batched pass writes,
	// in order; nil when they are all n rows in order.
	pick *compute.Tensor
	// hidden receives a batched pass's final hidden states (after the
	// final norm, before the output head) of the rows hpick lists (all n
	// rows in order when hpick is nil); nil when nobody reads any.
	hidden, hpick *compute.Tensor

	// seqs are the sequences of the pass in row order, with their
	// recurrent tensors (nil in a model without).
	seqs []passSeq
}

// passSeq is one sequence's rows [from, to) of a pass and its recurrent
// tensors.
type passSeq struct {
	from, to int
	rec      []*compute.Tensor
}

// onePass returns the pass of Forward over one sequence's state: st its
// caches, rec its recurrent tensors (nil in a model without).
func onePass(b compute.Backend, st *kvState, rec []*compute.Tensor, ids, pos, logits *compute.Tensor) *pass {
	n := ids.Len()
	// The state keeps its pass, so that a decode step allocates nothing.
	p := &st.one
	*p = pass{
		b: b, ar: st.arenaFor(n), ids: ids, pos: pos, logits: logits, kv: st,
		seqs: append(p.seqs[:0], passSeq{from: 0, to: n, rec: rec}),
	}
	return p
}

// wants reports whether the pass has an output to write: logits or
// hidden states. A pass without runs only what fills the caches.
func (p *pass) wants() bool { return p.logits != nil || p.hidden != nil }

// writeHidden writes the final norm (RMSNorm with weight norm) of the rows
// of x that the batch asks hidden states for into p.hidden.
func (p *pass) writeHidden(x, norm *compute.Tensor, eps, normOffset float32) {
	if p.hidden == nil {
		return
	}
	src := x
	if p.hpick != nil {
		src = p.ar.rows("hidden picked", p.hpick.Len(), x.Cols())
		p.b.Embed(src, x, p.hpick)
	}
	p.b.RMSNorm(p.hidden, src, norm, eps, normOffset)
}

// rows returns the number of rows of the pass.
func (p *pass) rows() int { return p.ids.Len() }

// part returns sequence s's rows of t: t itself when they are all its
// rows.
func (p *pass) part(t *compute.Tensor, s passSeq) *compute.Tensor {
	if s.from == 0 && s.to == t.Rows() {
		return t
	}
	return p.b.View(t, s.from, s.to)
}

// out returns the rows of x whose logits the pass writes: x, its last row,
// or the rows a batch asks for gathered into a buffer of the arena.
func (p *pass) out(x *compute.Tensor) *compute.Tensor {
	n := x.Rows()
	switch {
	case p.kv != nil:
		if p.logits.Rows() == 1 && n > 1 {
			return p.b.View(x, n-1, n)
		}
		return x
	case p.pick == nil:
		return x
	}
	g := p.ar.rows("picked", p.pick.Len(), x.Cols())
	p.b.Embed(g, x, p.pick)
	return g
}

// attend runs attention of the rows q over their sequences' keys and
// values with the rows' new keys k and values v: through a paged pool in a
// batched pass; in one sequence's cache (or the snapshot of it that cache
// names) otherwise.
func (p *pass) attend(a *attention, dst, q, k, v *compute.Tensor, cache *compute.KVCache) {
	if p.kv != nil {
		p.b.Attend(dst, q, k, v, cache, p.pos, &a.attn)
		return
	}
	c := p.cache
	p.cache.pager.AttendPaged(dst, q, k, v, c.pools[a.source], &p.bt.Pages[c.group[a.source]], p.pos, &a.attn)
}

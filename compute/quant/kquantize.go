package quant

import "math"

// Quantizing the k-quants. Each sub-block is fitted on its own (a scale,
// and for the affine formats a min), then the sub-block scales and mins are
// themselves quantized against a float16 super-block scale, and finally the
// codes are recomputed against the scales a reader will decode.

// round returns the nearest integer to v, ties to even, bounded to ±2³⁰ so
// that extreme ratios convert safely (callers clamp further).
func round(v float32) int {
	f := math.RoundToEven(float64(v))
	switch {
	case f > 1<<30:
		return 1 << 30
	case f < -(1 << 30):
		return -(1 << 30)
	case f != f:
		return 0
	}
	return int(f)
}

// clampInt bounds v to [lo, hi].
func clampInt(v, lo, hi int) int { return min(max(v, lo), hi) }

// fitAffine fits x ≈ scale·L − offset with codes L in [0, nmax], scale ≥ 0
// and offset ≥ 0 (the sub-block's minimum is never above zero), minimising
// the w-weighted squared error. It tries a grid of candidate step sizes
// around (max−min)/nmax and refits scale and offset by weighted least
// squares for each assignment of codes. L receives the codes of the best
// fit.
func fitAffine(x, w []float32, nmax int, L []uint8) (scale, offset float32) {
	lo, hi := minMax(x)
	lo = min(lo, 0)
	if hi == lo {
		clear(L)
		return 0, -lo
	}
	var sw, swx, swxx float64
	for i, v := range x {
		wv := float64(w[i]) * float64(v)
		sw += float64(w[i])
		swx += wv
		swxx += wv * float64(v)
	}
	span := hi - lo
	bestScale, bestMin := span/float32(nmax), lo
	bestErr := math.Inf(1)
	var trial [32]uint8
	tl := trial[:len(x)]
	for k := -10; k <= 10; k++ {
		is := (float32(nmax) + 0.1*float32(k)) / span
		var sl, sl2, sxl float64
		for i, v := range x {
			q := uint8(clampInt(round(is*(v-lo)), 0, nmax))
			tl[i] = q
			wq := float64(w[i]) * float64(q)
			sl += wq
			sl2 += wq * float64(q)
			sxl += wq * float64(v)
		}
		det := sw*sl2 - sl*sl
		if det <= 0 {
			continue
		}
		s := (sw*sxl - swx*sl) / det
		m := (sl2*swx - sl*sxl) / det
		if m > 0 { // keep the minimum at or below zero
			m, s = 0, sxl/sl2
		}
		// Σ w·(s·q + m − x)², expanded over the sums in hand.
		e := s*s*sl2 + 2*s*m*sl - 2*s*sxl + m*m*sw - 2*m*swx + swxx
		if e < bestErr {
			bestErr, bestScale, bestMin = e, float32(s), float32(m)
			copy(L, tl)
		}
	}
	if math.IsInf(bestErr, 1) {
		is := float32(nmax) / span
		for i, v := range x {
			L[i] = uint8(clampInt(round(is*(v-lo)), 0, nmax))
		}
	}
	return max(bestScale, 0), -bestMin
}

// fitSymmetric fits x ≈ scale·L with codes L in [−nmax, nmax−1],
// minimising the w-weighted squared error over a grid of candidate scales
// that map the element of largest magnitude near −nmax (the side with the
// extra level). It returns the scale; L receives the codes.
func fitSymmetric(x, w []float32, nmax int, L []int8) float32 {
	m, a := signedMax(x)
	if a < 1e-30 {
		clear(L)
		return 0
	}
	var trial [32]int8
	tl := trial[:len(x)]
	bestGain, bestScale := -1.0, float32(0)
	for k := -9; k <= 9; k++ {
		is := -(float32(nmax) + 0.1*float32(k)) / m
		var sxl, sl2 float64
		for i, v := range x {
			q := clampInt(round(is*v), -nmax, nmax-1)
			tl[i] = int8(q)
			wq := float64(w[i]) * float64(q)
			sxl += wq * float64(v)
			sl2 += wq * float64(q)
		}
		if sl2 <= 0 {
			continue
		}
		// The weighted error at the optimal scale sxl/sl2 is Σwx² − sxl²/sl2.
		if gain := sxl * sxl / sl2; gain > bestGain {
			bestGain, bestScale = gain, float32(sxl/sl2)
			copy(L, tl)
		}
	}
	if bestGain < 0 {
		is := -float32(nmax) / m
		for i, v := range x {
			L[i] = int8(clampInt(round(is*v), -nmax, nmax-1))
		}
		return 1 / is
	}
	return bestScale
}

// rmsWeights fills w with |x| plus the RMS of x: large elements matter
// more, but no element is ignored.
func rmsWeights(w, x []float32) {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	rms := float32(math.Sqrt(s / float64(len(x))))
	for i, v := range x {
		w[i] = rms + float32(math.Abs(float64(v)))
	}
}

// squareWeights fills w with x², plus a small floor so that a sub-block of
// near-zeros still has a well-defined fit.
func squareWeights(w, x []float32) {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	floor := float32(1e-6 * s / float64(len(x)))
	for i, v := range x {
		w[i] = v*v + floor
	}
}

// affineSuper fits each sub-block of x affinely and quantizes the
// sub-block scales and mins to bits-bit integers against float16 super
// scales. It returns the stored d and dmin (as read back) and the integer
// scales and mins.
func affineSuper(x []float32, sub, nmax, bits int, ls, lm []uint8) (d, dmin float32) {
	n := len(x) / sub
	var scales, mins [16]float32
	var w [32]float32
	var L [32]uint8
	var maxScale, maxMin float32
	for j := range n {
		xs := x[sub*j:][:sub]
		rmsWeights(w[:sub], xs)
		scales[j], mins[j] = fitAffine(xs, w[:sub], nmax, L[:sub])
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	top := float32(int(1)<<bits - 1)
	var tmp [2]byte
	d = putF16(tmp[:], maxScale/top)
	dmin = putF16(tmp[:], maxMin/top)
	for j := range n {
		ls[j], lm[j] = 0, 0
		if d > 0 {
			ls[j] = uint8(clampInt(round(scales[j]/d), 0, int(top)))
		}
		if dmin > 0 {
			lm[j] = uint8(clampInt(round(mins[j]/dmin), 0, int(top)))
		}
	}
	return d, dmin
}

// affineCodes recomputes the codes of one sub-block against its decoded
// scale and min.
func affineCodes(L []uint8, x []float32, scale, minv float32, nmax int) {
	if scale == 0 {
		clear(L)
		return
	}
	for i, v := range x {
		L[i] = uint8(clampInt(round((v+minv)/scale), 0, nmax))
	}
}

// symmetricSuper fits each sub-block of x symmetrically and quantizes the
// signed sub-block scales to integers in [−smax, smax−1] against a float16
// super scale chosen so that the largest scale maps to −smax. It returns
// the stored d and fills ls.
func symmetricSuper(x []float32, sub, nmax, smax int, ls []int) float32 {
	n := len(x) / sub
	var scales [16]float32
	var w [32]float32
	var L [32]int8
	for j := range n {
		xs := x[sub*j:][:sub]
		squareWeights(w[:sub], xs)
		scales[j] = fitSymmetric(xs, w[:sub], nmax, L[:sub])
	}
	m, a := signedMax(scales[:n])
	var tmp [2]byte
	if a < 1e-30 {
		clear(ls[:n])
		return putF16(tmp[:], 0)
	}
	d := putF16(tmp[:], m/-float32(smax))
	for j := range n {
		ls[j] = 0
		if d != 0 {
			ls[j] = clampInt(round(scales[j]/d), -smax, smax-1)
		}
	}
	return d
}

// symmetricCodes recomputes the codes of one sub-block against its decoded
// scale, offset by nmax so they are non-negative.
func symmetricCodes(L []uint8, x []float32, scale float32, nmax int) {
	if scale == 0 {
		for i := range L {
			L[i] = uint8(nmax)
		}
		return
	}
	for i, v := range x {
		L[i] = uint8(clampInt(round(v/scale), -nmax, nmax-1) + nmax)
	}
}

func encodeQ2_K(dst []byte, src []float32) {
	for i := 0; i < len(src); i += qkK {
		x := src[i:][:qkK]
		b := dst[i/qkK*q2kBytes:][:q2kBytes]
		var ls, lm [16]uint8
		d, dmin := affineSuper(x, 16, 3, 4, ls[:], lm[:])
		putF16(b[q2kD:], d)
		putF16(b[q2kD+2:], dmin)
		var L [qkK]uint8
		for j := range 16 {
			b[q2kScales+j] = ls[j] | lm[j]<<4
			affineCodes(L[16*j:][:16], x[16*j:][:16], d*float32(ls[j]), dmin*float32(lm[j]), 3)
		}
		packTwoBit(b[q2kQS:][:64], L[:])
	}
}

// packTwoBit stores the low two bits of 256 codes: element 128h + 32j + l
// at bit 2j of q[32h + l].
func packTwoBit(q []byte, L []uint8) {
	for h := range 2 {
		for l := range 32 {
			e := L[128*h+l:]
			q[32*h+l] = e[0]&3 | (e[32]&3)<<2 | (e[64]&3)<<4 | (e[96]&3)<<6
		}
	}
}

func encodeQ3_K(dst []byte, src []float32) {
	for i := 0; i < len(src); i += qkK {
		x := src[i:][:qkK]
		b := dst[i/qkK*q3kBytes:][:q3kBytes]
		clear(b)
		var ls [16]int
		d := symmetricSuper(x, 16, 4, 32, ls[:])
		putF16(b[q3kD:], d)
		s := b[q3kScales:][:12]
		var L [qkK]uint8
		for j := range 16 {
			l := byte(ls[j] + 32)
			if j < 8 {
				s[j] |= l & 0xF
			} else {
				s[j-8] |= (l & 0xF) << 4
			}
			s[8+j%4] |= (l >> 4) << (2 * (j / 4))
			symmetricCodes(L[16*j:][:16], x[16*j:][:16], d*float32(ls[j]), 4)
		}
		hm := b[q3kHMask:][:32]
		for e, v := range L {
			if v > 3 {
				hm[e%32] |= 1 << (e / 32)
			}
		}
		packTwoBit(b[q3kQS:][:64], L[:])
	}
}

// putScaleMinK4 packs the 6-bit scales and mins of a Q4_K or Q5_K
// super-block (the inverse of scaleMinK4).
func putScaleMinK4(s []byte, ls, lm []uint8) {
	clear(s[:12])
	for j := range 8 {
		if j < 4 {
			s[j] = ls[j]
			s[j+4] = lm[j]
			continue
		}
		s[j+4] = ls[j]&0xF | (lm[j]&0xF)<<4
		s[j-4] |= (ls[j] >> 4) << 6
		s[j] |= (lm[j] >> 4) << 6
	}
}

// affineK4 is the shared part of Q4_K and Q5_K: it writes d, dmin and the
// scales at b[0:16] and returns the codes.
func affineK4(b []byte, x []float32, nmax int, L []uint8) {
	var ls, lm [8]uint8
	d, dmin := affineSuper(x, 32, nmax, 6, ls[:], lm[:])
	putF16(b, d)
	putF16(b[2:], dmin)
	putScaleMinK4(b[4:16], ls[:], lm[:])
	for j := range 8 {
		affineCodes(L[32*j:][:32], x[32*j:][:32], d*float32(ls[j]), dmin*float32(lm[j]), nmax)
	}
}

func encodeQ4_K(dst []byte, src []float32) {
	for i := 0; i < len(src); i += qkK {
		x := src[i:][:qkK]
		b := dst[i/qkK*q4kBytes:][:q4kBytes]
		var L [qkK]uint8
		affineK4(b, x, 15, L[:])
		for c := range 4 {
			q := b[q4kQS+32*c:][:32]
			for l := range 32 {
				q[l] = L[64*c+l] | L[64*c+32+l]<<4
			}
		}
	}
}

func encodeQ5_K(dst []byte, src []float32) {
	for i := 0; i < len(src); i += qkK {
		x := src[i:][:qkK]
		b := dst[i/qkK*q5kBytes:][:q5kBytes]
		var L [qkK]uint8
		affineK4(b, x, 31, L[:])
		qh := b[q5kQH:][:32]
		clear(qh)
		for c := range 4 {
			q := b[q5kQS+32*c:][:32]
			for l := range 32 {
				lo, hi := L[64*c+l], L[64*c+32+l]
				q[l] = lo&0xF | (hi&0xF)<<4
				qh[l] |= (lo>>4)<<(2*c) | (hi>>4)<<(2*c+1)
			}
		}
	}
}

func encodeQ6_K(dst []byte, src []float32) {
	for i := 0; i < len(src); i += qkK {
		x := src[i:][:qkK]
		b := dst[i/qkK*q6kBytes:][:q6kBytes]
		var ls [16]int
		d := symmetricSuper(x, 16, 32, 128, ls[:])
		putF16(b[q6kD:], d)
		var L [qkK]uint8
		for j := range 16 {
			b[q6kScales+j] = byte(int8(ls[j]))
			symmetricCodes(L[16*j:][:16], x[16*j:][:16], d*float32(ls[j]), 32)
		}
		for h := range 2 {
			ql := b[q6kQL+64*h:][:64]
			qh := b[q6kQH+32*h:][:32]
			e := L[128*h:][:128]
			for l := range 32 {
				ql[l] = e[l]&0xF | (e[l+64]&0xF)<<4
				ql[l+32] = e[l+32]&0xF | (e[l+96]&0xF)<<4
				qh[l] = e[l]>>4 | (e[l+32]>>4)<<2 | (e[l+64]>>4)<<4 | (e[l+96]>>4)<<6
			}
		}
	}
}

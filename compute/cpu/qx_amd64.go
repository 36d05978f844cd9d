//go:build amd64 && !purego

package cpu

import "unsafe"

// quantizeAsm quantizes activations as quantizeX does with the assembly of
// the level the quantized kernels run at, and reports whether it did.
func quantizeAsm(dst []byte, x []float32, f xfmt, off int32) bool {
	k := len(x)
	if k == 0 {
		return true
	}
	lv := qlevel()
	if lv == levelGeneric {
		return false
	}
	d, p := unsafe.SliceData(dst[:f.rowBytes(k)]), unsafe.SliceData(x)
	switch f {
	case xfL64Q4, xfL64Q8:
		if lv != levelAVX512 {
			return false
		}
		nb := k / 32
		if nb%2 == 1 {
			clear(dst[nb/2*192 : (nb/2+1)*192])
		}
		if f == xfL64Q4 {
			qxAVX512L64Q4(d, p, nb, int(off))
		} else {
			qxAVX512L64Q8(d, p, nb, int(off))
		}
	case xfL128Q4:
		if lv != levelAVX512 {
			return false
		}
		nb := k / 32
		if nb%4 != 0 {
			clear(dst[nb/4*256 : (nb/4+1)*256])
		}
		qxAVX512L128Q4(d, p, nb, int(off))
	case xfK4, xfK6:
		switch {
		case lv == levelAVX512 && f == xfK4:
			qxAVX512K4(d, p, k/256)
		case lv == levelAVX512:
			qxAVX512K6(d, p, k/256)
		case f == xfK4:
			qxAVX2K4(d, p, k/256)
		default:
			qxAVX2K6(d, p, k/256)
		}
	case xfL32:
		qxAVX2L32(d, p, k/32, int(off))
	default:
		return false
	}
	return true
}

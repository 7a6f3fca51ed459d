package bench

import (
	"math/bits"
	"sync/atomic"
)

// hist is a latency histogram in the manner of HdrHistogram: values below
// 2^histSub are counted exactly, larger ones in 2^histSub buckets per power
// of two (under 1 % relative error), in a fixed array of atomic counters, so
// recording costs a few instructions and never allocates, from any number
// of goroutines.
type hist struct {
	counts [(64 - histSub + 1) << histSub]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Uint64
	max    atomic.Uint64
	min    atomic.Uint64 // stores min+1 so that 0 means "none"
}

const histSub = 7

// histIndex returns the bucket of v.
func histIndex(v uint64) int {
	k := bits.Len64(v)
	if k <= histSub {
		return int(v)
	}
	shift := k - histSub
	return shift<<histSub | int(v>>shift)&(1<<histSub-1)
}

// histValue returns the middle of bucket i.
func histValue(i int) uint64 {
	shift := i >> histSub
	m := uint64(i & (1<<histSub - 1))
	if shift == 0 {
		return m
	}
	m |= 1 << (histSub - 1) // the top bit that the index drops
	return m<<shift + 1<<(shift-1)
}

// record adds one value.
func (h *hist) record(v uint64) {
	h.counts[histIndex(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
	for {
		m := h.min.Load()
		if (m != 0 && v+1 >= m) || h.min.CompareAndSwap(m, v+1) {
			break
		}
	}
}

// count is the number of values.
func (h *hist) count() uint64 { return h.n.Load() }

// mean is the average value.
func (h *hist) mean() float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return float64(h.sum.Load()) / float64(n)
}

// percentile returns the value at or below which p percent of the values
// lie (p in 0..100).
func (h *hist) percentile(p float64) uint64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	want := uint64(p / 100 * float64(n))
	if want == 0 {
		want = 1
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= want {
			v := histValue(i)
			if mx := h.max.Load(); v > mx {
				v = mx
			}
			return v
		}
	}
	return h.max.Load()
}

// minimum is the smallest value.
func (h *hist) minimum() uint64 {
	m := h.min.Load()
	if m == 0 {
		return 0
	}
	return m - 1
}

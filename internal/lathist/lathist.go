// Package lathist is the latency histogram of the metrics, shared by the
// target and the host: fixed log-linear buckets (4 per octave from 100 ns
// to about 22 s, then +Inf) of atomic counters, so that recording costs an
// index computation and two atomic adds, never an allocation or a lock.
// Snapshots are summed on scrape. No Prometheus types: the commands turn
// snapshots into histograms. What is recorded is fine (19 % buckets, for
// nvmeof bench's quantiles); what is exported is coarse (Export: one bucket
// per octave from about 1.3 µs, 25 bounds), because every exported bucket
// is a time series per histogram (issue 23.10: 113 per histogram made ~96k
// series per target).
package lathist

import (
	"math"
	"sync/atomic"
	"time"
)

// Bucket layout: upper bounds FirstBound · 2^(i/PerOctave), i = 0 ..
// Buckets-1; a bucket is 19 % wide.
const (
	Buckets    = 112
	PerOctave  = 4
	FirstBound = 100 * time.Nanosecond
)

// Bounds are the buckets' upper bounds in seconds.
var Bounds = func() []float64 {
	b := make([]float64, Buckets)
	for i := range b {
		b[i] = FirstBound.Seconds() * math.Exp2(float64(i)/PerOctave)
	}
	return b
}()

// Index is the bucket of a latency: the first whose bound is at least d
// (Buckets: +Inf).
func Index(d time.Duration) int {
	ns := int64(d)
	if ns <= int64(FirstBound) {
		return 0
	}
	i := int(math.Ceil(PerOctave * math.Log2(float64(ns)/float64(FirstBound))))
	// Rounding at an exact bound: keep the first bucket that holds d.
	if i > 0 && i-1 < Buckets && float64(ns) <= Bounds[i-1]*1e9 {
		i--
	}
	return min(i, Buckets)
}

// Hist is a histogram being recorded: counts per bucket (the last is +Inf)
// and the sum in nanoseconds.
type Hist struct {
	B   [Buckets + 1]atomic.Uint64
	Sum atomic.Uint64
}

// Observe counts one latency.
func (h *Hist) Observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.B[Index(d)].Add(1)
	h.Sum.Add(uint64(d))
}

// Add adds o's counts to h (folding a closed queue into a total).
func (h *Hist) Add(o *Hist) {
	for j := range h.B {
		if v := o.B[j].Load(); v != 0 {
			h.B[j].Add(v)
		}
	}
	h.Sum.Add(o.Sum.Load())
}

// AddTo adds h to the snapshot s.
func (h *Hist) AddTo(s *Snap) {
	for i := range h.B {
		s.B[i] += h.B[i].Load()
	}
	s.Sum += h.Sum.Load()
}

// Snap is a plain (summed) snapshot of histograms.
type Snap struct {
	B   [Buckets + 1]uint64
	Sum uint64 // nanoseconds
}

// Add adds o to s.
func (s *Snap) Add(o *Snap) {
	for j := range o.B {
		s.B[j] += o.B[j]
	}
	s.Sum += o.Sum
}

// Count is the number of values.
func (s *Snap) Count() uint64 {
	var n uint64
	for _, v := range s.B {
		n += v
	}
	return n
}

// Quantile estimates the q-quantile (linear within the bucket, as
// Prometheus' histogram_quantile).
func (s *Snap) Quantile(q float64) time.Duration {
	n := s.Count()
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	var seen float64
	for i, v := range s.B {
		if seen+float64(v) >= rank && v > 0 {
			lo := 0.0
			if i > 0 {
				lo = Bounds[i-1]
			}
			hi := lo
			if i < Buckets {
				hi = Bounds[i]
			}
			f := (rank - seen) / float64(v)
			return time.Duration((lo + (hi-lo)*f) * 1e9)
		}
		seen += float64(v)
	}
	return time.Duration(Bounds[Buckets-1] * 1e9)
}

// Export layout: the exported histograms keep one bound per octave (every
// PerOctave-th bound of the recorded layout, so that an exported bucket is
// a sum of recorded ones and no count moves across a bound) from
// ExportFirst on; latencies below ExportFirst fall in the first exported
// bucket.
const (
	exportStep  = PerOctave
	exportFirst = 15 // Bounds[15] = 100 ns · 2^3.75 ≈ 1.35 µs
	// ExportBuckets is the number of finite bounds Export returns (the
	// +Inf bucket comes on top): 1.35 µs, 2.7 µs, ... 22.6 s.
	ExportBuckets = (Buckets-1-exportFirst)/exportStep + 1
)

// ExportBounds are the exported histograms' finite upper bounds in seconds.
var ExportBounds = func() []float64 {
	b := make([]float64, 0, ExportBuckets)
	for i := exportFirst; i < Buckets; i += exportStep {
		b = append(b, Bounds[i])
	}
	return b
}()

// Export returns the cumulative counts at ExportBounds and the total: the
// histogram a scrape exposes.
func (s *Snap) Export() (buckets map[float64]uint64, count uint64) {
	buckets = make(map[float64]uint64, ExportBuckets)
	var cum uint64
	for i := 0; i < Buckets; i++ {
		cum += s.B[i]
		if i >= exportFirst && (i-exportFirst)%exportStep == 0 {
			buckets[Bounds[i]] = cum
		}
	}
	return buckets, cum + s.B[Buckets]
}

// Cumulative returns the cumulative counts at every step-th bound (1: all
// bounds; the last bound is always included) and the total, for a
// Prometheus histogram.
func (s *Snap) Cumulative(step int) (buckets map[float64]uint64, count uint64) {
	buckets = make(map[float64]uint64, Buckets/step+1)
	var cum uint64
	for i := 0; i < Buckets; i++ {
		cum += s.B[i]
		if i%step == step-1 || i == Buckets-1 {
			buckets[Bounds[i]] = cum
		}
	}
	return buckets, cum + s.B[Buckets]
}

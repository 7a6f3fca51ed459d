package lathist

import (
	"math"
	"testing"
	"time"
)

// TestExport: the exported layout is one bound per octave from about
// 1.35 µs to about 22.6 s (25 bounds), each a bound of the recorded layout,
// so that the exported cumulative counts are exact sums of recorded buckets.
func TestExport(t *testing.T) {
	if len(ExportBounds) != ExportBuckets || ExportBuckets != 25 {
		t.Fatalf("%d export bounds, ExportBuckets %d", len(ExportBounds), ExportBuckets)
	}
	if math.Abs(ExportBounds[0]-1.345e-6) > 0.01e-6 || ExportBounds[len(ExportBounds)-1] < 20 {
		t.Fatalf("export range %g .. %g s", ExportBounds[0], ExportBounds[len(ExportBounds)-1])
	}
	for i := 1; i < len(ExportBounds); i++ {
		if r := ExportBounds[i] / ExportBounds[i-1]; math.Abs(r-2) > 1e-9 {
			t.Fatalf("bounds %d and %d: ratio %g, want 2", i-1, i, r)
		}
	}
	var h Hist
	for _, d := range []time.Duration{50 * time.Nanosecond, time.Microsecond, 2 * time.Microsecond, 100 * time.Microsecond, time.Second, time.Hour} {
		h.Observe(d)
	}
	var s Snap
	h.AddTo(&s)
	b, n := s.Export()
	if n != 6 || len(b) != ExportBuckets {
		t.Fatalf("count %d, %d buckets", n, len(b))
	}
	// Cumulative: below 1.35 µs two values, below 2.69 µs three, below
	// 172 µs four, below 1.38 s five; the hour only in +Inf.
	for bound, want := range map[float64]uint64{ExportBounds[0]: 2, ExportBounds[1]: 3, ExportBounds[7]: 4, ExportBounds[20]: 5, ExportBounds[24]: 5} {
		if b[bound] != want {
			t.Errorf("le=%g: %d, want %d", bound, b[bound], want)
		}
	}
}

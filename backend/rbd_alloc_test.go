//go:build rbd

package backend_test

import "testing"

// TestRBDNoAllocs: the rbd data path allocates nothing per call in steady
// state on the Go side (librbd's own memory is C's), as TestNoAllocs for
// the other backends.
func TestRBDNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race (make alloc does)")
	}
	r, _, _ := openRBD(t, 16<<20, 512)
	defer r.Close()
	buf := pageBuffer(t, 128<<10)
	for _, n := range []int{4096, 128 << 10} {
		p := buf[:n]
		if err := r.WriteAt(p, 1<<20, false); err != nil {
			t.Fatal(err)
		}
		for name, fn := range map[string]func() error{
			"ReadAt":                func() error { return r.ReadAt(p, 1<<20) },
			"WriteAt":               func() error { return r.WriteAt(p, 1<<20, false) },
			"WriteAtFUA":            func() error { return r.WriteAt(p, 1<<20, true) },
			"WriteZeroes":           func() error { return r.WriteZeroes(2<<20, int64(n), false) },
			"WriteZeroesDeallocate": func() error { return r.WriteZeroes(2<<20, int64(n), true) },
			"Discard":               func() error { return r.Discard(2<<20, int64(n)) },
			"Flush":                 r.Flush,
		} {
			var err error
			allocs := testing.AllocsPerRun(20, func() {
				if e := fn(); e != nil {
					err = e
				}
			})
			if err != nil {
				t.Fatalf("%s %d bytes: %v", name, n, err)
			}
			if allocs != 0 {
				t.Errorf("%s of %d bytes: %v allocations per call, want 0", name, n, allocs)
			}
		}
	}
}

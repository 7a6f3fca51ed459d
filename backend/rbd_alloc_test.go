//go:build rbd

package backend_test

import "testing"

// TestRBDNoAllocs: the rbd data path allocates nothing per call in steady
// state on the Go side (librbd's own memory is C's), as TestNoAllocs for
// the other backends.
func TestRBDNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race (make alloc and make test-rbd do)")
	}
	r, _, _ := openRBD(t, 16<<20, 512)
	defer r.Close()
	checkNoAllocs(t, r, 20)
}

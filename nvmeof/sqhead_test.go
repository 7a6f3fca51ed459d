package nvmeof

import (
	"sync"
	"testing"
)

// The head wraps at the queue size and counts every completion once, from
// any number of goroutines; with flow control off every SQHD is FFFFh.
func TestSQHeadAdvance(t *testing.T) {
	var h SQHead
	const size, n = 32, 1000
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if v := h.Advance(size); v >= size {
					t.Errorf("SQHD %d for a queue of %d", v, size)
				}
			}
		}()
	}
	wg.Wait()
	if got, want := h.Advance(size), uint16((4*n+1)%size); got != want {
		t.Fatalf("after %d completions SQHD %d, want %d", 4*n+1, got, want)
	}
	h.DisableFlowControl()
	if !h.FlowControlOff() || h.Advance(size) != 0xFFFF {
		t.Fatal("flow control off: want SQHD FFFFh")
	}
}

package nvmeof

import "sync/atomic"

// SQHead is a controller's submission queue head pointer as its
// completions report it (the CQE's SQHD). The head advances by one as each
// command completes, as Linux's nvmet_update_sq_head does, so SQHD grows in
// completion order. A host that disabled SQ flow control in its Connect
// (CATTR bit 2, NVMe-oF 1.1 §3.3) gets 0xFFFF in every completion. Safe for
// concurrent use: a queue's commands complete on several goroutines.
type SQHead struct {
	head    atomic.Uint32
	flowOff atomic.Bool
}

// DisableFlowControl records the host's Connect with SQ flow control
// disabled.
func (h *SQHead) DisableFlowControl() { h.flowOff.Store(true) }

// FlowControlOff reports whether the host disabled SQ flow control.
func (h *SQHead) FlowControlOff() bool { return h.flowOff.Load() }

// Advance moves the head past one completed command of a queue of size
// entries and returns the SQHD for its completion (0xFFFF with flow control
// off).
func (h *SQHead) Advance(size int) uint16 {
	if h.flowOff.Load() {
		return 0xFFFF
	}
	for {
		old := h.head.Load()
		next := (old + 1) % uint32(size)
		if h.head.CompareAndSwap(old, next) {
			return uint16(next)
		}
	}
}

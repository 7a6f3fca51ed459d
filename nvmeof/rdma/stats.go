package rdma

import "github.com/nvmetd/nvmetd/iwarp"

// QPStats are the counters of a queue's iWARP QP, for metrics: its state,
// FPDUs, MPA CRC errors and the Terminate it sent or received.
type QPStats struct {
	State                    string // "idle", "rts", "closing", "terminate", "error"
	FPDUsSent, FPDUsReceived uint64
	CRCErrors                uint64
	// Terminates (RFC 5040 §5.3), at most one each way per QP, with their
	// cause (RFC 5040 §7.1): layer<<12 | error type<<8 | error code.
	TerminateSent, TerminateReceived           bool
	TerminateSentCause, TerminateReceivedCause uint16
}

// TCPInfo is a TCP_INFO sample of a queue's connection.
type TCPInfo = iwarp.TCPInfo

func qpStats(qp *iwarp.QP) QPStats {
	e := qp.Stats()
	return QPStats{
		State:     qp.State().String(),
		FPDUsSent: e.FPDUsSent, FPDUsReceived: e.FPDUsReceived, CRCErrors: e.CRCErrors,
		TerminateSent: e.TerminateSent, TerminateReceived: e.TerminateReceived,
		TerminateSentCause: e.TerminateSentCause, TerminateReceivedCause: e.TerminateReceivedCause,
	}
}

// QPStats returns the counters of the queue's QP (takes the QP's lock:
// for scrapes, not the data path).
func (q *ControllerQueue) QPStats() QPStats { return qpStats(q.qp) }

// TCPInfo samples TCP_INFO on the queue's connection (a system call).
func (q *ControllerQueue) TCPInfo() (TCPInfo, error) { return q.qp.TCPInfo() }

// QPStats returns the counters of the queue's QP.
func (q *HostQueue) QPStats() QPStats { return qpStats(q.qp) }

// TCPInfo samples TCP_INFO on the queue's connection (a system call).
func (q *HostQueue) TCPInfo() (TCPInfo, error) { return q.qp.TCPInfo() }

// AdmissionStats are the counters of an Admission: connections now, and
// those accepted, admitted, refused, evicted and timed out so far.
type AdmissionStats = iwarp.AdmissionStats

// Stats returns the Admission's counters.
func (a *Admission) Stats() AdmissionStats { return a.a.Stats() }

// Tap sees a queue's bytes as they cross its socket (wire traces).
type Tap = iwarp.Tap

// TapInfo is a queue's connection endpoints and MPA frames, for traces.
type TapInfo = iwarp.TapInfo

// SetTap sets (nil: removes) the queue's tap.
func (q *ControllerQueue) SetTap(t Tap) { q.qp.SetTap(t) }

// TapInfo returns the queue's endpoints and MPA frames.
func (q *ControllerQueue) TapInfo() TapInfo { return q.qp.TapInfo() }

// SetTap sets (nil: removes) the queue's tap.
func (q *HostQueue) SetTap(t Tap) { q.qp.SetTap(t) }

// TapInfo returns the queue's endpoints and MPA frames.
func (q *HostQueue) TapInfo() TapInfo { return q.qp.TapInfo() }

package initiator

import (
	"sync/atomic"
	"time"

	"github.com/nvmetd/nvmetd/internal/lathist"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// ioStats are an I/O queue's counters for metrics: plain atomics updated by
// the goroutines that send and complete its commands, read by IOStats.
type ioStats struct {
	sent                          atomic.Uint64 // commands put on the wire (retries included)
	completed                     atomic.Uint64 // completions (any status)
	dropped                       atomic.Uint64 // sent, then the connection ended first
	reads, writes, others, errors atomic.Uint64 // completed, by kind; errors: non-success status
	readBytes, writeBytes         atomic.Uint64
	readLat, writeLat, otherLat   lathist.Hist // from the send to the completion
}

// record counts a completion of opcode with status st after d.
func (s *ioStats) record(opcode uint8, st nvmeof.Status, n int, d time.Duration) {
	s.completed.Add(1)
	if st != nvmeof.StatusSuccess {
		s.errors.Add(1)
	}
	switch opcode {
	case nvmeof.NVMRead:
		s.reads.Add(1)
		if st == nvmeof.StatusSuccess {
			s.readBytes.Add(uint64(n))
		}
		s.readLat.Observe(d)
	case nvmeof.NVMWrite:
		s.writes.Add(1)
		if st == nvmeof.StatusSuccess {
			s.writeBytes.Add(uint64(n))
		}
		s.writeLat.Observe(d)
	default:
		s.others.Add(1)
		s.otherLat.Observe(d)
	}
}

// QueueIOStats are the counters of one host I/O queue, for metrics.
type QueueIOStats struct {
	QID uint16
	// Completed commands by kind, and those with an error status.
	Reads, Writes, Others, Errors uint64
	ReadBytes, WriteBytes         uint64
	// InFlight is the number of commands on the wire now.
	InFlight uint64
	// Latencies from the capsule's send to its completion.
	ReadLatency, WriteLatency, OtherLatency lathist.Snap
}

// IOStats returns the counters of the controller's I/O queues.
func (c *Controller) IOStats() []QueueIOStats {
	out := make([]QueueIOStats, 0, len(c.ioq))
	for _, q := range c.ioq {
		s := &q.stats
		st := QueueIOStats{
			QID: q.qid, Reads: s.reads.Load(), Writes: s.writes.Load(), Others: s.others.Load(), Errors: s.errors.Load(),
			ReadBytes: s.readBytes.Load(), WriteBytes: s.writeBytes.Load(),
		}
		done := s.completed.Load() + s.dropped.Load()
		if sent := s.sent.Load(); sent > done {
			st.InFlight = sent - done
		}
		s.readLat.AddTo(&st.ReadLatency)
		s.writeLat.AddTo(&st.WriteLatency)
		s.otherLat.AddTo(&st.OtherLatency)
		out = append(out, st)
	}
	return out
}

// QueueTransport is one host queue's QP counters and TCP_INFO sample.
type QueueTransport struct {
	QID uint16
	QP  rdma.QPStats
	// TCP is valid when TCPOK (the connection may have ended meanwhile).
	TCP   rdma.TCPInfo
	TCPOK bool
}

// TransportStats samples the queues of the current association, admin
// queue first: QP state, FPDUs, CRC errors, Terminates and TCP_INFO. It
// makes a system call per queue: for metrics scrapes, not the data path.
func (c *Controller) TransportStats() []QueueTransport {
	a := c.current()
	if a == nil {
		return nil
	}
	out := make([]QueueTransport, 0, 1+len(a.io))
	add := func(q hostQueue) {
		hq, ok := q.(*rdma.HostQueue) // NVMe/TCP queues have no QP counters
		if !ok || hq == nil {
			return
		}
		t := QueueTransport{QID: hq.QID(), QP: hq.QPStats()}
		if ti, err := hq.TCPInfo(); err == nil {
			t.TCP, t.TCPOK = ti, true
		}
		out = append(out, t)
	}
	add(a.admin)
	for _, hq := range a.io {
		add(hq)
	}
	return out
}

package initiator

import (
	"context"
	"fmt"
	"net"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
	"github.com/nvmetd/nvmetd/nvmeof/tcp"
)

// hostQueue is the host's transport seam: one queue of a binding
// (*rdma.HostQueue or *tcp.HostQueue). The controller, keep-alive,
// reconnect, multipath and DH-HMAC-CHAP speak only to it.
type hostQueue interface {
	// QID is the queue identifier.
	QID() uint16
	// Submit sends a command; exactly one r.Done follows a nil return,
	// none an error (nvmeof.ErrQueueFull, nvmeof.ErrQueueClosed).
	Submit(r *nvmeof.HostRequest) error
	// Do submits r and waits for it, bounded by ctx (which tears the
	// queue down when it ends first).
	Do(ctx context.Context, r *nvmeof.HostRequest) error
	// Abort ends the connection at once with err as its cause.
	Abort(err error)
	// Close disconnects and waits for the queue's commands to end.
	Close()
	// Done is closed when the queue has ended and its commands completed.
	Done() <-chan struct{}
	// Err is why the queue ended.
	Err() error
	// LocalAddr is the connection's local address.
	LocalAddr() net.Addr
}

var (
	_ hostQueue = (*rdma.HostQueue)(nil)
	_ hostQueue = (*tcp.HostQueue)(nil)
)

// TCP reports whether the configuration names the NVMe/TCP transport.
func (c *Config) TCP() bool { return c.TrType == nvmeof.TrTypeTCP }

// TransportName is the transport's name as nvme-cli spells it (-t).
func (c *Config) TransportName() string {
	if c.TCP() {
		return "tcp"
	}
	return "rdma"
}

// dialQueue opens queue qid of the configured transport (pd: the
// association's protection domain, NVMe/RDMA only).
func (c *Controller) dialQueue(ctx context.Context, qid uint16, size, inline int, pd *rdma.PD) (hostQueue, error) {
	cfg := &c.cfg
	if cfg.TCP() {
		tc := cfg.TCPTransport
		tc.QID, tc.QueueSize, tc.InlineDataSize, tc.Logger = qid, size, inline, c.log
		if tc.BusyPoll == 0 {
			// One busy-poll setting for the host's queues of either
			// transport (nvmeof --busy-poll).
			tc.BusyPoll = cfg.Transport.BusyPoll
		}
		q, err := tcp.Dial(ctx, cfg.Network, cfg.Address, tc)
		if err != nil {
			return nil, err
		}
		return q, nil
	}
	q, err := rdma.Dial(ctx, cfg.Network, cfg.Address, rdma.HostConfig{
		Transport: cfg.Transport, QID: qid, QueueSize: size, InlineDataSize: inline, PD: pd, Logger: c.log,
	})
	if err != nil {
		return nil, err
	}
	return q, nil
}

// maxQueueSize is the transport's largest I/O queue: NVME_RDMA_MAX_QUEUE_SIZE,
// or for NVMe/TCP what nvmeof/tcp accepts.
func (c *Controller) maxQueueSize() int {
	if c.cfg.TCP() {
		return tcp.MaxQueueSizeLimit
	}
	return nvmeof.RDMAMaxQueueSize
}

// inlineDataSize is the in-capsule data of I/O queues: SGLS bit 20,
// IOCCSZ*16-64 bytes; as nvme-rdma at most NVME_RDMA_MAX_INLINE_SEGMENTS
// (4) pages, as nvme-tcp all of it (bounded by what nvmeof/tcp sends).
func (c *Controller) inlineDataSize(id *nvmeof.IdentifyController) int {
	if c.cfg.TCP() {
		return min(id.InlineDataSize(), tcp.MaxInlineDataSize)
	}
	return min(id.InlineDataSize(), 4*4096)
}

// queueStats is a queue's counters in the RDMA host's form (NVMe/TCP:
// the commands completed and sent with in-capsule data).
func queueStats(q hostQueue) rdma.HostStats {
	switch hq := q.(type) {
	case *rdma.HostQueue:
		return hq.Stats()
	case *tcp.HostQueue:
		s := hq.Stats()
		return rdma.HostStats{Completed: s.Completed, InCapsule: s.InCapsule}
	}
	return rdma.HostStats{}
}

// checkTransport validates the transport choice.
func (c *Config) checkTransport() error {
	switch c.TrType {
	case 0:
		c.TrType = nvmeof.TrTypeRDMA
	case nvmeof.TrTypeRDMA, nvmeof.TrTypeTCP:
	default:
		return fmt.Errorf("initiator: transport type %d: want rdma (%d) or tcp (%d)", c.TrType, nvmeof.TrTypeRDMA, nvmeof.TrTypeTCP)
	}
	return nil
}

package target

// QueueStatus is one queue (admin or I/O) of a live controller, for the
// management API's queue list (SPDK's nvmf_get_stats per queue pair).
type QueueStatus struct {
	// Subsystem is the subsystem NQN (the discovery NQN for discovery
	// controllers).
	Subsystem string `json:"subsystem"`
	CNTLID    uint16 `json:"cntlid"`
	HostNQN   string `json:"host_nqn"`
	PortID    uint16 `json:"port_id"`
	// QID is 0 for the admin queue.
	QID uint16 `json:"qid"`
	// Size is the queue's number of entries (HSQSIZE+1).
	Size          int    `json:"size"`
	RemoteAddress string `json:"remote_address"`
	LocalAddress  string `json:"local_address"`
	// InFlight is the number of commands received and not yet completed
	// (held Asynchronous Event Requests excluded).
	InFlight int64      `json:"in_flight"`
	IO       IOCounters `json:"io"`
	// Transport is the queue's binding: "rdma" or "tcp".
	Transport string `json:"transport"`
	// SQFlowControlDisabled: the host disabled SQ flow control in the
	// queue's Connect (completions report SQHD FFFFh; on NVMe/TCP reads
	// are answered by their C2HData's SUCCESS flag).
	SQFlowControlDisabled bool `json:"sq_flow_control_disabled,omitempty"`
}

// Queues returns every queue of every live controller, by subsystem (in
// configuration order, discovery last), CNTLID and QID. It does no I/O.
func (t *Target) Queues() []QueueStatus {
	s := t.s
	if s.phase.Load() != phaseRunning {
		return nil
	}
	var out []QueueStatus
	for _, c := range s.allControllers() {
		c.mu.Lock()
		for _, q := range c.queues {
			if q == nil {
				continue
			}
			out = append(out, QueueStatus{
				Subsystem: c.sub.nqn, CNTLID: c.cntlid, HostNQN: c.hostNQN, PortID: c.port.id,
				QID: q.qid, Size: q.size, RemoteAddress: addrString(q.remote), LocalAddress: addrString(q.local),
				InFlight: q.inflight.Load(), IO: q.counters(),
				Transport: q.transport(), SQFlowControlDisabled: q.sqFlowOff.Load(),
			})
		}
		c.mu.Unlock()
	}
	return out
}

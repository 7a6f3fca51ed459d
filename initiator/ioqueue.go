package initiator

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// ioQueue is one I/O queue of the controller. It outlives associations:
// each association gives it a new connection (hq), and commands that could
// not be sent (no connection, SQ full) wait in pending, in order.
type ioQueue struct {
	c    *Controller
	qid  uint16
	cmds []cmd // command slots this queue owns (size-1 of them)

	mu      perfcount.Mutex
	hq      hostQueue // nil while not connected
	gen     uint64    // association of hq
	pending []*cmd
	// failErr, once set, is the error of every command that would be kept
	// on pending: the controller is dead, or closing without a connection
	// to send it on. Set and checked under mu, so that no command is kept
	// after the pending list was failed.
	failErr error

	// stats count its commands for metrics (stats.go).
	stats ioStats
}

// cmdState says who owns a command slot; every hand-over is checked, so that
// a command finished or sent twice fails loudly where it happens.
type cmdState uint32

// Command slot states.
const (
	// cmdFree: in Controller.free.
	cmdFree cmdState = iota
	// cmdHeld: owned by the goroutine working on it (being built, sent,
	// completed or failed).
	cmdHeld
	// cmdPending: on an ioQueue's pending list.
	cmdPending
	// cmdOutstanding: its HostRequest is submitted on a HostQueue, which
	// calls its Done exactly once.
	cmdOutstanding
)

func (s cmdState) String() string {
	switch s {
	case cmdFree:
		return "free"
	case cmdHeld:
		return "held"
	case cmdPending:
		return "pending"
	case cmdOutstanding:
		return "outstanding"
	}
	return fmt.Sprintf("cmdState(%d)", uint32(s))
}

// cmd is one NVMe command of a Request: a command slot with its reusable
// HostRequest. Nothing in it is allocated per I/O.
type cmd struct {
	hr       nvmeof.HostRequest
	owner    *ioQueue        // the queue whose slot this is
	slot     int             // its index in owner.cmds
	on       *ioQueue        // the queue it was last sent on
	req      *Request        // the request it is part of
	retries  uint8           // retries after a retryable NVMe status
	state    atomic.Uint32   // a cmdState: who owns the slot
	deadline atomic.Int64    // when it times out (Controller.now units); 0: not outstanding
	gen      atomic.Uint64   // association it was last sent on
	opcode   atomic.Uint32   // of the command last sent (for the timeout report)
	dsm      nvmeof.DSMRange // Dataset Management range data (Discard)
	sentAt   int64           // when it was last sent (Controller.now units), for the metrics
}

// move hands m over from state from to state to. Any other current state
// is a broken invariant (a command owned twice), reported with what m is.
func (m *cmd) move(from, to cmdState) {
	if !m.state.CompareAndSwap(uint32(from), uint32(to)) {
		panic(fmt.Sprintf("initiator: command slot %d of qid %d (%s, cid %#x) is %v, want %v on its way to %v",
			m.slot, m.owner.qid, nvmeof.OpcodeName(1, &m.hr.SQE), m.hr.SQE.CID(), cmdState(m.state.Load()), from, to))
	}
}

// getCmd takes a free command slot, waiting for one if none is free.
func (c *Controller) getCmd(done <-chan struct{}) (*cmd, error) {
	select {
	case m := <-c.free:
		m.move(cmdFree, cmdHeld)
		return m, nil
	default:
	}
	select {
	case m := <-c.free:
		m.move(cmdFree, cmdHeld)
		return m, nil
	case <-done:
		return nil, errCanceled
	case <-c.deadCh:
		return nil, c.ioErr()
	}
}

// errCanceled stands for the waiting context's error (the caller replaces it).
var errCanceled = errors.New("initiator: canceled")

// tryGetCmd takes a free command slot if there is one.
func (c *Controller) tryGetCmd() *cmd {
	select {
	case m := <-c.free:
		m.move(cmdFree, cmdHeld)
		return m
	default:
		return nil
	}
}

// route picks the queue to send m on: its own, or, when the association has
// fewer queues than before, a live one.
func (c *Controller) route(m *cmd) *ioQueue {
	q := m.owner
	if n := int(c.nLive.Load()); n > 0 && int(q.qid) > n {
		q = c.ioq[int(c.rr.Add(1))%n]
	}
	return q
}

// submit sends m, or keeps it on its queue's pending list until it can be
// sent.
func (c *Controller) submit(m *cmd) {
	q := c.route(m)
	q.mu.Lock()
	if err := q.failErr; err != nil {
		q.mu.Unlock()
		c.retire(m, err)
		return
	}
	hq := q.hq
	if hq == nil && m.req.failover {
		// A multipath command does not wait for this controller to
		// reconnect: it goes back to its head for another path
		// (nvmf_fail_nonready_command: nvme_host_path_error).
		q.mu.Unlock()
		c.retire(m, ErrPathDown)
		return
	}
	if hq == nil || len(q.pending) > 0 {
		m.move(cmdHeld, cmdPending)
		q.pending = append(q.pending, m)
		q.mu.Unlock()
		if hq != nil {
			q.drain()
		}
		return
	}
	gen := q.gen
	q.mu.Unlock()
	if !c.send(q, hq, gen, m) {
		q.keep(m, false)
		q.drain()
	}
}

// send puts m on the wire of hq. It returns false if m must wait (queue
// full or closed); a closed queue also asks for error recovery. Once it
// returns true, m is no longer the caller's: its completion may already
// have run.
func (c *Controller) send(q *ioQueue, hq hostQueue, gen uint64, m *cmd) bool {
	m.on = q
	m.gen.Store(gen)
	m.opcode.Store(uint32(m.hr.SQE.Opcode()))
	m.sentAt = c.now()
	m.deadline.Store(m.sentAt + int64(c.cfg.IOTimeout))
	m.move(cmdHeld, cmdOutstanding)
	q.stats.sent.Add(1)
	err := hq.Submit(&m.hr)
	if err == nil {
		return true
	}
	q.stats.sent.Add(^uint64(0)) // not sent after all
	// A failed Submit never completes the command (the bindings' HostQueue.Submit):
	// it is still ours.
	m.move(cmdOutstanding, cmdHeld)
	m.deadline.Store(0)
	switch {
	case errors.Is(err, nvmeof.ErrQueueFull):
		return false
	case errors.Is(err, nvmeof.ErrQueueClosed):
		if cause := hq.Err(); cause != nil {
			err = cause
		}
		c.queueFailed(gen, err)
		return false
	}
	c.retire(m, err) // cannot be sent at all (e.g. longer than a keyed SGL)
	return true
}

// keep puts m on q's pending list, at its head if front (a command taken
// from the head that could not be sent), and returns the queue's connection
// and its association. If commands can no longer be kept (failErr), m fails
// instead and kept is false.
func (q *ioQueue) keep(m *cmd, front bool) (hq hostQueue, gen uint64, kept bool) {
	q.mu.Lock()
	if err := q.failErr; err != nil {
		q.mu.Unlock()
		q.c.retire(m, err)
		return nil, 0, false
	}
	if q.hq == nil && m.req.failover {
		q.mu.Unlock()
		q.c.retire(m, ErrPathDown)
		return nil, 0, false
	}
	m.move(cmdHeld, cmdPending)
	if front {
		q.pending = append(q.pending, nil)
		copy(q.pending[1:], q.pending)
		q.pending[0] = m
	} else {
		q.pending = append(q.pending, m)
	}
	hq, gen = q.hq, q.gen
	q.mu.Unlock()
	return hq, gen, true
}

// drain sends pending commands while the queue takes them.
func (q *ioQueue) drain() {
	for {
		q.mu.Lock()
		hq := q.hq
		if hq == nil || len(q.pending) == 0 {
			q.mu.Unlock()
			return
		}
		m := q.pending[0]
		n := copy(q.pending, q.pending[1:])
		q.pending[n] = nil
		q.pending = q.pending[:n]
		m.move(cmdPending, cmdHeld)
		gen := q.gen
		q.mu.Unlock()
		if !q.c.send(q, hq, gen, m) {
			if now, _, kept := q.keep(m, true); !kept || now == hq {
				return // a completion drains again
			}
		}
	}
}

// park keeps m, which its connection (of association gen) failed, on the
// queue it was sent on, to be sent again after reconnecting; if the queue
// already has a newer connection, at once.
func (q *ioQueue) park(m *cmd, gen uint64) {
	if hq, now, kept := q.keep(m, false); kept && hq != nil && now != gen {
		q.drain()
	}
}

// done is the completion of m's HostRequest, on the queue's engine goroutine
// (or the queue's teardown).
func (m *cmd) done(hr *nvmeof.HostRequest) {
	m.move(cmdOutstanding, cmdHeld)
	m.deadline.Store(0)
	q := m.on
	c := q.c
	if hr.Err != nil && m.req.failover {
		// Multipath: the command goes back to its head, which sends it on
		// another path (nvme_failover_req after nvme_cancel_request's
		// NVME_SC_HOST_ABORTED_CMD). It is no longer outstanding here: the
		// connection is gone.
		gen := m.gen.Load()
		c.retire(m, fmt.Errorf("%w: %v", ErrPathDown, hr.Err))
		c.queueFailed(gen, hr.Err)
		return
	}
	if hr.Err != nil {
		// The connection ended before the completion: the command may or
		// may not have run. Keep it and send it again after reconnecting
		// (blk-mq requeue in nvme_rdma's error recovery); on a dead or
		// closing controller it fails instead (keep).
		gen := m.gen.Load() // before park: m may be sent again at once
		q.stats.dropped.Add(1)
		q.park(m, gen)
		c.queueFailed(gen, hr.Err)
		return
	}
	c.compSeen.Store(true)
	q.stats.record(hr.SQE.Opcode(), hr.CQE.Status(), len(hr.Data), time.Duration(c.now()-m.sentAt))
	if st := hr.CQE.Status(); st != nvmeof.StatusSuccess {
		// nvme_decide_disposition: retry unless DNR, up to nvme_max_retries;
		// a path-related status of a multipath command fails over instead.
		if !st.DNR() && m.retries < MaxRetries && m.req.failover && st.SCT() == nvmeof.SCTPath {
			c.retire(m, m.ioError(st))
			q.drain()
			return
		}
		if !st.DNR() && m.retries < MaxRetries && !c.closing.Load() {
			m.retries++
			c.submit(m)
			return
		}
		c.retire(m, m.ioError(st))
	} else {
		c.retire(m, nil)
	}
	q.drain()
}

// retire returns m's slot and reports its result to its request.
func (c *Controller) retire(m *cmd, err error) {
	r := m.req
	m.req = nil
	m.retries = 0
	m.hr.Data = nil
	m.move(cmdHeld, cmdFree)
	c.free <- m // never blocks: the channel holds every slot
	r.chunkDone(err)
}

// takePending empties every queue's pending list and returns the commands
// that were on them, now the caller's. With fail set, the queues keep no
// command from now on: later ones fail with fail at once.
func (c *Controller) takePending(fail error) []*cmd {
	var kept []*cmd
	for _, q := range c.ioq {
		q.mu.Lock()
		if fail != nil {
			q.hq = nil
			if q.failErr == nil {
				q.failErr = fail
			}
		}
		for _, m := range q.pending {
			m.move(cmdPending, cmdHeld)
		}
		kept = append(kept, q.pending...)
		clear(q.pending)
		q.pending = q.pending[:0]
		q.mu.Unlock()
	}
	return kept
}

// failoverPending gives the multipath commands kept on the queues back to
// their heads (the association they waited for is gone).
func (c *Controller) failoverPending() {
	var out []*cmd
	for _, q := range c.ioq {
		q.mu.Lock()
		kept := q.pending[:0]
		for _, m := range q.pending {
			if m.req.failover {
				m.move(cmdPending, cmdHeld)
				out = append(out, m)
			} else {
				kept = append(kept, m)
			}
		}
		clear(q.pending[len(kept):])
		q.pending = kept
		q.mu.Unlock()
	}
	for _, m := range out {
		c.retire(m, ErrPathDown)
	}
}

// resubmitPending sends again the commands kept while no association was
// live.
func (c *Controller) resubmitPending() {
	max := int(c.maxXfer.Load())
	for _, m := range c.takePending(nil) {
		if len(m.hr.Data) > max && m.hr.SQE.Opcode() != nvmeof.NVMDatasetManagement {
			c.retire(m, &IOError{Op: opName(m.hr.SQE.Opcode()), Err: errors.New("transfer larger than the reconnected controller's MDTS")})
			continue
		}
		c.submit(m)
	}
}

// ioErr is the error of I/O on a controller that cannot take it.
func (c *Controller) ioErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadErr != nil {
		return c.deadErr
	}
	if c.closing.Load() {
		return ErrControllerClosed
	}
	if len(c.ioq) == 0 {
		return ErrNoIOQueues
	}
	return nil
}

// IOError is an I/O command that failed, with what it was.
type IOError struct {
	Op     string // "read", "write", "flush", "write-zeroes", "discard"
	NSID   uint32
	SLBA   uint64
	Blocks uint32
	Err    error // an nvmeof.Status, or why the command could not be sent
}

// Error describes the command and the failure.
func (e *IOError) Error() string {
	if e.Blocks == 0 {
		return "initiator: " + e.Op + " failed: " + e.Err.Error()
	}
	return "initiator: " + e.Op + " of " + itoa(uint64(e.Blocks)) + " blocks at LBA " + itoa(e.SLBA) + " failed: " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *IOError) Unwrap() error { return e.Err }

func (m *cmd) ioError(st nvmeof.Status) error {
	e := &IOError{Op: opName(m.hr.SQE.Opcode()), NSID: m.hr.SQE.NSID(), Err: st}
	switch m.hr.SQE.Opcode() {
	case nvmeof.NVMRead, nvmeof.NVMWrite, nvmeof.NVMWriteZeroes:
		rw := m.hr.SQE.RWCmd()
		e.SLBA, e.Blocks = rw.SLBA(), rw.Blocks()
	}
	return e
}

func opName(op uint8) string {
	switch op {
	case nvmeof.NVMRead:
		return "read"
	case nvmeof.NVMWrite:
		return "write"
	case nvmeof.NVMFlush:
		return "flush"
	case nvmeof.NVMWriteZeroes:
		return "write-zeroes"
	case nvmeof.NVMDatasetManagement:
		return "discard"
	}
	return "command"
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

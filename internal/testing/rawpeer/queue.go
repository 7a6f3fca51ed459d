package rawpeer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nvmetd/nvmetd/iwarp/wire"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// Region is host memory registered with the raw peer: the target may RDMA
// Write into it (Write) and RDMA Read from it (Read) at TOs from TO to
// TO+len(Buf), naming it by STag.
type Region struct {
	STag        uint32
	TO          uint64
	Buf         []byte
	Read, Write bool
	// Invalidated is set when the target sent a Send with Invalidate of
	// STag; the region stays usable (the raw peer does not enforce it).
	Invalidated bool
}

// slice returns the n bytes at TO to, if they lie inside the region.
func (r *Region) slice(to uint64, n int) ([]byte, bool) {
	if to < r.TO || to-r.TO > uint64(len(r.Buf)) || uint64(n) > uint64(len(r.Buf))-(to-r.TO) {
		return nil, false
	}
	off := to - r.TO
	return r.Buf[off : off+uint64(n)], true
}

// Queue is one NVMe/RDMA queue of a raw host: an iWARP connection whose MPA
// private data was the NVMe/RDMA CM request (NVMe-oF 1.1 §7.3.4).
type Queue struct {
	*Conn
	QID  uint16
	Size int // HSQSIZE+1
	// CM is the CM request sent; CMAccept the controller's accept data.
	CM       rdma.CMRequest
	CMAccept rdma.CMAccept
	// IgnoreReads makes Next record the target's RDMA Read Requests without
	// answering them (a host whose memory never answers).
	IgnoreReads bool

	mu         sync.Mutex
	regions    map[uint32]*Region
	nextIdx    uint32
	cid        uint16
	msg        []byte // Send message being reassembled
	msgActive  bool
	recvMSN    uint32 // next MSN expected on the target's QN 0
	rrMSN      uint32 // next MSN expected on the target's QN 1
	readReqs   []wire.ReadRequest
	placed     int
	violations []string
}

// CMRejectedError is an MPA reject whose private data is an NVMe/RDMA CM
// reject (NVMe-oF 1.1 Figure 57).
type CMRejectedError struct {
	Status rdma.CMRejectStatus
	// Valid is false when the reject carried no parseable CM reject data.
	Valid bool
	Reply wire.MPAFrame
}

func (e *CMRejectedError) Error() string {
	if !e.Valid {
		return fmt.Sprintf("rawpeer: queue rejected without NVMe/RDMA reject data (%d bytes of private data)", len(e.Reply.PrivateData))
	}
	return fmt.Sprintf("rawpeer: queue rejected: %v (%#x)", e.Status, uint16(e.Status))
}

// QueueRequest is the MPA request of a queue: enhanced revision 2 with IRD
// and ORD 16 and the CM request as private data.
func QueueRequest(cm rdma.CMRequest) wire.MPAFrame { return Request(cm.Append(nil)) }

// CMRequest is the CM request of a queue of size entries, as the Linux host
// sends it.
func CMRequest(qid uint16, size int) rdma.CMRequest {
	return rdma.CMRequest{QID: qid, HRQSize: uint16(size), HSQSize: uint16(size - 1)}
}

// DialQueue opens a queue: TCP, then the MPA exchange with req (see
// QueueRequest). A refusal returns a *CMRejectedError (with the Queue, whose
// connection the target closes).
func DialQueue(ctx context.Context, addr string, req wire.MPAFrame, o Options) (*Queue, error) {
	c, err := Dial(ctx, addr, o)
	if err != nil {
		return nil, err
	}
	q := NewQueue(c)
	if cm, err := rdma.ParseCMRequest(req.PrivateData); err == nil {
		q.CM, q.QID, q.Size = cm, cm.QID, int(cm.HSQSize)+1
	}
	var deadline time.Time
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	rep, err := c.Handshake(req, deadline)
	var rej *RejectedError
	if errors.As(err, &rej) {
		e := &CMRejectedError{Reply: rep}
		if st, perr := rdma.ParseCMReject(rep.PrivateData); perr == nil {
			e.Status, e.Valid = st, true
		}
		return q, e
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	if acc, err := rdma.ParseCMAccept(rep.PrivateData); err == nil {
		q.CMAccept = acc
	}
	return q, nil
}

// NewQueue makes a Queue of a connection whose MPA exchange the caller does
// itself.
func NewQueue(c *Conn) *Queue {
	return &Queue{Conn: c, regions: map[uint32]*Region{}, nextIdx: 0x1234, recvMSN: 1, rrMSN: 1}
}

// Register makes buf host memory the target may read (read) and write
// (write) and returns its region.
func (q *Queue) Register(buf []byte, read, write bool) *Region {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.nextIdx++
	r := &Region{STag: q.nextIdx<<8 | 0x5A, TO: uint64(q.nextIdx) << 32, Buf: buf, Read: read, Write: write}
	q.regions[r.STag] = r
	return r
}

// ReadRequests returns the RDMA Read Requests the target sent so far.
func (q *Queue) ReadRequests() []wire.ReadRequest {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]wire.ReadRequest(nil), q.readReqs...)
}

// Violations lists what the target did that a host would not allow
// (RDMA Writes or Reads outside registered memory, Sends out of sequence).
func (q *Queue) Violations() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.violations...)
}

// PlacedBytes is the number of bytes the target RDMA-Wrote into regions.
func (q *Queue) PlacedBytes() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.placed
}

func (q *Queue) violate(format string, args ...any) {
	q.violations = append(q.violations, fmt.Sprintf(format, args...))
}

// NextCID returns a fresh command identifier.
func (q *Queue) NextCID() uint16 {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cid++
	return q.cid
}

// EventKind is what Next saw.
type EventKind int

// Event kinds.
const (
	EvNone         EventKind = iota // no event (the zero Event)
	EvCQE                           // a response capsule
	EvWrite                         // an RDMA Write segment (placed if allowed)
	EvReadRequest                   // an RDMA Read Request (answered unless IgnoreReads)
	EvReadResponse                  // an RDMA Read Response (never asked for)
	EvTerminate                     // a Terminate
	EvSegment                       // a non-final segment of a Send
)

// Event is one FPDU from the target, interpreted.
type Event struct {
	Kind EventKind
	FPDU *FPDU
	// CQE is the response capsule (EvCQE); Invalidate is set with the STag
	// when it came as a Send with Invalidate.
	CQE        nvmeof.CQE
	Invalidate uint32
	// ReadRequest is the request (EvReadRequest); Answered says whether it
	// was answered.
	ReadRequest wire.ReadRequest
	Answered    bool
	// Terminate is the decoded Terminate (EvTerminate).
	Terminate wire.Terminate
}

// TerminatedError is a Terminate received while waiting for something else.
type TerminatedError struct{ Terminate wire.Terminate }

func (e *TerminatedError) Error() string {
	return "rawpeer: target sent a Terminate: " + e.Terminate.Cause.String()
}

// Next reads one FPDU from the target and acts on it as a host would: an
// RDMA Write is placed into the region it names, an RDMA Read Request is
// answered from the region it names (unless IgnoreReads), a Send is
// reassembled into a response capsule.
func (q *Queue) Next(deadline time.Time) (Event, error) {
	f, err := q.ReadFPDU(deadline)
	if err != nil {
		return Event{}, err
	}
	ev := Event{FPDU: f}
	if !f.CRCOK {
		q.mu.Lock()
		q.violate("FPDU %v with a bad CRC", f.Header.Opcode)
		q.mu.Unlock()
	}
	h := &f.Header
	switch h.Opcode {
	case wire.OpWrite:
		ev.Kind = EvWrite
		q.mu.Lock()
		r := q.regions[h.STag]
		switch {
		case len(f.Payload) == 0:
		case r == nil || !r.Write:
			q.violate("RDMA Write of %d bytes to STag %#x, not writable", len(f.Payload), h.STag)
		default:
			if dst, ok := r.slice(h.TO, len(f.Payload)); ok {
				copy(dst, f.Payload)
				q.placed += len(f.Payload)
			} else {
				q.violate("RDMA Write of %d bytes to STag %#x at TO %#x, beyond the region", len(f.Payload), h.STag, h.TO)
			}
		}
		q.mu.Unlock()
	case wire.OpReadRequest:
		ev.Kind = EvReadRequest
		rr, err := wire.DecodeReadRequest(f.Payload)
		if err != nil {
			return ev, err
		}
		ev.ReadRequest = rr
		q.mu.Lock()
		if h.MSN != q.rrMSN {
			q.violate("Read Request MSN %d, expected %d", h.MSN, q.rrMSN)
		}
		q.rrMSN = h.MSN + 1
		q.readReqs = append(q.readReqs, rr)
		var src []byte
		ok := false
		if r := q.regions[rr.SrcSTag]; r != nil && r.Read {
			src, ok = r.slice(rr.SrcTO, int(rr.Size))
		}
		if !ok {
			q.violate("RDMA Read of %d bytes from STag %#x TO %#x, not readable", rr.Size, rr.SrcSTag, rr.SrcTO)
		}
		data := append([]byte(nil), src...)
		q.mu.Unlock()
		if ok && !q.IgnoreReads {
			if err := q.SendTagged(wire.OpReadResponse, rr.SinkSTag, rr.SinkTO, data, deadline); err != nil {
				return ev, fmt.Errorf("rawpeer: answering a Read Request: %w", err)
			}
			ev.Answered = true
		}
	case wire.OpReadResponse:
		ev.Kind = EvReadResponse
		q.mu.Lock()
		q.violate("RDMA Read Response to STag %#x, no Read outstanding", h.STag)
		q.mu.Unlock()
	case wire.OpTerminate:
		ev.Kind = EvTerminate
		t, _, err := wire.DecodeTerminateAny(f.Payload)
		if err != nil {
			return ev, err
		}
		ev.Terminate = t
	default: // the Send variants
		q.mu.Lock()
		if !q.msgActive {
			if h.MSN != q.recvMSN {
				q.violate("Send MSN %d, expected %d", h.MSN, q.recvMSN)
			}
			q.msg, q.msgActive = q.msg[:0], true
		}
		q.msg = append(q.msg, f.Payload...)
		if !h.Last {
			q.mu.Unlock()
			ev.Kind = EvSegment
			return ev, nil
		}
		q.msgActive = false
		q.recvMSN = h.MSN + 1
		msg := q.msg
		if len(msg) != nvmeof.CQESize {
			q.violate("response capsule of %d bytes", len(msg))
		}
		if h.Opcode.Invalidates() {
			ev.Invalidate = h.STag
			if r := q.regions[h.STag]; r != nil {
				r.Invalidated = true
			} else {
				q.violate("Send with Invalidate of STag %#x, never registered", h.STag)
			}
		}
		q.mu.Unlock()
		ev.Kind = EvCQE
		copy(ev.CQE[:], msg)
	}
	return ev, nil
}

// Command sends a command capsule (the SQE, then any in-capsule data) as a
// Send and returns without waiting. The SQE's CID is used as is.
func (q *Queue) Command(sqe *nvmeof.SQE, inCapsule []byte) error {
	capsule := append(append(make([]byte, 0, nvmeof.SQESize+len(inCapsule)), sqe[:]...), inCapsule...)
	return q.SendMessage(wire.OpSend, 0, capsule, time.Time{})
}

// Wait runs Next until the response to cid arrives. A Terminate or the end
// of the connection is an error; responses to other commands are returned
// in others.
func (q *Queue) Wait(cid uint16, deadline time.Time) (cqe nvmeof.CQE, others []nvmeof.CQE, err error) {
	for {
		ev, err := q.Next(deadline)
		if err != nil {
			return cqe, others, err
		}
		switch ev.Kind {
		case EvTerminate:
			return cqe, others, &TerminatedError{Terminate: ev.Terminate}
		case EvCQE:
			if ev.CQE.CID() == cid {
				return ev.CQE, others, nil
			}
			others = append(others, ev.CQE)
		}
	}
}

// Do sends a command with a fresh CID and waits for its response.
func (q *Queue) Do(sqe *nvmeof.SQE, inCapsule []byte, deadline time.Time) (nvmeof.CQE, error) {
	sqe.SetCID(q.NextCID())
	if err := q.Command(sqe, inCapsule); err != nil {
		return nvmeof.CQE{}, err
	}
	cqe, _, err := q.Wait(sqe.CID(), deadline)
	return cqe, err
}

// ConnectData builds Connect data.
func ConnectData(subnqn, hostnqn string, hostID [16]byte, cntlid uint16) *nvmeof.ConnectData {
	var d nvmeof.ConnectData
	d.SetHostID(hostID)
	d.SetCNTLID(cntlid)
	d.SetSubNQN(subnqn)
	d.SetHostNQN(hostnqn)
	return &d
}

// ConnectSQE builds the Connect command of the queue (SQSIZE = Size-1)
// for data d: in-capsule (returned as the capsule data) or keyed in a
// region registered for it.
func (q *Queue) ConnectSQE(d *nvmeof.ConnectData, kato uint32, inCapsule bool) (*nvmeof.SQE, []byte) {
	var sqe nvmeof.SQE
	sqe.BuildConnect(q.QID, uint16(q.Size-1), kato)
	if inCapsule {
		sqe.SGL1().SetInCapsule(0, nvmeof.ConnectDataSize)
		return &sqe, append([]byte(nil), d[:]...)
	}
	r := q.Register(append([]byte(nil), d[:]...), true, false)
	sqe.SGL1().SetKeyed(r.TO, nvmeof.ConnectDataSize, r.STag, false)
	return &sqe, nil
}

// Connect runs a Fabrics Connect on the queue and returns its response.
func (q *Queue) Connect(d *nvmeof.ConnectData, kato uint32, inCapsule bool, deadline time.Time) (nvmeof.CQE, error) {
	sqe, data := q.ConnectSQE(d, kato, inCapsule)
	return q.Do(sqe, data, deadline)
}

// StatusError is a command completed with a non-zero status.
type StatusError struct {
	What string
	CQE  nvmeof.CQE
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("rawpeer: %s: status %v (DW0 %#x)", e.What, e.CQE.Status(), e.CQE.Result())
}

// Host is a raw host's association with a controller: its admin queue and
// the I/O queues it opened.
type Host struct {
	Addr            string
	SubNQN, HostNQN string
	HostID          [16]byte
	Opts            Options
	Admin           *Queue
	CNTLID          uint16
	IO              []*Queue
}

// ConnectHost opens an admin queue (32 entries) and connects a dynamic
// controller with Connect data fetched by RDMA Read, as Linux does, with
// keep-alive timeout kato (ms).
func ConnectHost(ctx context.Context, addr, subnqn, hostnqn string, hostID [16]byte, kato uint32, o Options) (*Host, error) {
	req := QueueRequest(CMRequest(0, nvmeof.AdminQueueDepth))
	req.CRC = o.CRC
	q, err := DialQueue(ctx, addr, req, o)
	if err != nil {
		return nil, err
	}
	h := &Host{Addr: addr, SubNQN: subnqn, HostNQN: hostnqn, HostID: hostID, Opts: o, Admin: q}
	cqe, err := q.Connect(ConnectData(subnqn, hostnqn, hostID, nvmeof.CNTLIDDynamic), kato, false, ctxDeadline(ctx))
	if err == nil && cqe.Status() != nvmeof.StatusSuccess {
		err = &StatusError{What: "admin Connect", CQE: cqe}
	}
	if err != nil {
		q.Close()
		return nil, err
	}
	h.CNTLID = uint16(cqe.Result())
	return h, nil
}

func ctxDeadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// PropertyGet reads a controller property.
func (h *Host) PropertyGet(off uint32, deadline time.Time) (uint64, error) {
	var sqe nvmeof.SQE
	sqe.BuildPropertyGet(off)
	sqe.SGL1().SetNull()
	cqe, err := h.Admin.Do(&sqe, nil, deadline)
	if err == nil && cqe.Status() != nvmeof.StatusSuccess {
		err = &StatusError{What: "Property Get", CQE: cqe}
	}
	return cqe.Result64(), err
}

// PropertySet writes a controller property.
func (h *Host) PropertySet(off uint32, v uint64, deadline time.Time) error {
	var sqe nvmeof.SQE
	sqe.BuildPropertySet(off, v)
	sqe.SGL1().SetNull()
	cqe, err := h.Admin.Do(&sqe, nil, deadline)
	if err == nil && cqe.Status() != nvmeof.StatusSuccess {
		err = &StatusError{What: "Property Set", CQE: cqe}
	}
	return err
}

// Enable sets CC.EN (with IOSQES 6, IOCQES 4) and waits for CSTS.RDY.
func (h *Host) Enable(deadline time.Time) error {
	var cc nvmeof.CC
	cc.SetIOSQES(6)
	cc.SetIOCQES(4)
	cc.SetEN(true)
	if err := h.PropertySet(nvmeof.PropCC, uint64(cc), deadline); err != nil {
		return err
	}
	for {
		v, err := h.PropertyGet(nvmeof.PropCSTS, deadline)
		if err != nil {
			return err
		}
		if nvmeof.CSTS(v).RDY() {
			return nil
		}
		if nvmeof.CSTS(v).CFS() {
			return fmt.Errorf("rawpeer: controller fatal status (CSTS %v)", nvmeof.CSTS(v))
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("rawpeer: CSTS.RDY not set by the deadline")
		}
		time.Sleep(time.Millisecond)
	}
}

// ConnectIO opens I/O queue qid of size entries and connects it to the
// controller with in-capsule Connect data.
func (h *Host) ConnectIO(ctx context.Context, qid uint16, size int, o Options) (*Queue, error) {
	req := QueueRequest(CMRequest(qid, size))
	req.CRC = o.CRC
	q, err := DialQueue(ctx, h.Addr, req, o)
	if err != nil {
		return nil, err
	}
	cqe, err := q.Connect(ConnectData(h.SubNQN, h.HostNQN, h.HostID, h.CNTLID), 0, true, ctxDeadline(ctx))
	if err == nil && cqe.Status() != nvmeof.StatusSuccess {
		err = &StatusError{What: fmt.Sprintf("I/O Connect of QID %d", qid), CQE: cqe}
	}
	if err != nil {
		q.Close()
		return nil, err
	}
	h.IO = append(h.IO, q)
	return q, nil
}

// Close closes every queue of the association (I/O queues first).
func (h *Host) Close() {
	for _, q := range h.IO {
		q.Close()
	}
	h.Admin.Close()
}

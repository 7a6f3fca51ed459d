package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/iwarp"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// memCtrl is a tiny controller over RAM for exercising the binding: Read and
// Write move data between its memory and the host, Identify returns 4 KiB of
// a pattern, Flush is a no-op, anything else is Invalid Opcode. With async
// set it completes I/O from another goroutine, as a backend worker would.
type memCtrl struct {
	mu       sync.Mutex
	mem      []byte
	async    bool
	closed   chan error
	queues   atomic.Int32
	commands atomic.Int64
	hold     chan *Request  // if set, Read commands park here
	holdW    chan *Request  // if set, Write commands park here once their data is in
	seen     func(*Request) // if set, called with every command as it arrives
}

func newMemCtrl(size int) *memCtrl {
	return &memCtrl{mem: make([]byte, size), closed: make(chan error, 16)}
}

func (m *memCtrl) HandleCommand(r *Request) {
	m.commands.Add(1)
	if m.seen != nil {
		m.seen(r)
	}
	sqe := r.SQE()
	switch {
	case r.Queue().QID() == 0 && sqe.Opcode() == nvmeof.AdminIdentify:
		d := r.Data()
		if len(d) != nvmeof.IdentifyDataSize {
			r.Complete(nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR)
			return
		}
		for i := range d {
			d[i] = byte(i)
		}
		r.SetResult(0x1234)
		r.Complete(nvmeof.StatusSuccess)
	case sqe.Opcode() == nvmeof.NVMWrite:
		r.FetchData()
	case sqe.Opcode() == nvmeof.NVMRead:
		if m.hold != nil {
			m.hold <- r
			return
		}
		m.run(r, func() nvmeof.Status {
			off := int(sqe.RWCmd().SLBA()) * 512
			if off+len(r.Data()) > len(m.mem) {
				return nvmeof.StatusLBAOutOfRange
			}
			m.mu.Lock()
			copy(r.Data(), m.mem[off:])
			m.mu.Unlock()
			return nvmeof.StatusSuccess
		})
	case sqe.Opcode() == nvmeof.NVMFlush:
		r.Complete(nvmeof.StatusSuccess)
	default:
		r.Complete(nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR)
	}
}

func (m *memCtrl) run(r *Request, f func() nvmeof.Status) {
	if m.async {
		go func() { r.Complete(f()) }()
		return
	}
	r.Complete(f())
}

func (m *memCtrl) DataReady(r *Request, err error) {
	if err != nil {
		r.Complete(nvmeof.StatusDataTransferError)
		return
	}
	if m.holdW != nil {
		m.holdW <- r
		return
	}
	m.run(r, func() nvmeof.Status {
		off := int(r.SQE().RWCmd().SLBA()) * 512
		if off+len(r.Data()) > len(m.mem) {
			return nvmeof.StatusLBAOutOfRange
		}
		m.mu.Lock()
		copy(m.mem[off:], r.Data())
		m.mu.Unlock()
		return nvmeof.StatusSuccess
	})
}

func (m *memCtrl) QueueClosed(q *ControllerQueue, err error) {
	m.queues.Add(-1)
	select { // a record for tests that look; QueueClosed must not block
	case m.closed <- err:
	default:
	}
}

// serve accepts queues on a listener for a controller.
func serve(t testing.TB, cfg ControllerConfig, h Handler) *Listener {
	t.Helper()
	cfg.AdmitOnAccept = true // memCtrl has no Fabrics Connect
	ln, err := Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var queues []*ControllerQueue
	var mu sync.Mutex
	go func() {
		defer close(done)
		for {
			req, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			if m, ok := h.(*memCtrl); ok {
				m.queues.Add(1)
			}
			q, err := req.Accept(h)
			if err != nil {
				if m, ok := h.(*memCtrl); ok {
					m.queues.Add(-1)
				}
				continue
			}
			mu.Lock()
			queues = append(queues, q)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, q := range queues {
			q.Close()
			<-q.Done()
		}
	})
	return ln
}

// hang is how long a test waits for something the binding does at once (a
// dial, a completion): a hang guard, generous so that a loaded machine never
// fails it, never a bound the binding must meet.
const hang = time.Minute

func dialQ(t testing.TB, addr string, cfg HostConfig) *HostQueue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	q, err := Dial(ctx, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

func do(t testing.TB, q *HostQueue, r *HostRequest) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	return q.Do(ctx, r)
}

func TestCMPrivateData(t *testing.T) {
	// Linux nvme-rdma's admin queue request, from the lab capture.
	linux := []byte{0, 0, 0, 0, 0x20, 0, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	r, err := ParseCMRequest(linux)
	if err != nil || r != (CMRequest{QID: 0, HRQSize: 32, HSQSize: 31}) {
		t.Fatalf("%+v %v", r, err)
	}
	if b := r.Append(nil); !bytes.Equal(b, linux) {
		t.Fatalf("encode %x", b)
	}
	// nvmet's accept for an I/O queue of 128: crqsize 128.
	a := CMAccept{CRQSize: 128}
	if b := a.Append(nil); !bytes.Equal(b[:4], []byte{0, 0, 0x80, 0}) || len(b) != 32 {
		t.Fatalf("accept %x", b)
	}
	for i := 0; i < CMRequestLen; i++ {
		var rej *CMRejectError
		if _, err := ParseCMRequest(linux[:i]); !errors.As(err, &rej) || rej.Status != CMRejectInvalidPrivateDataLen {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
	bad := bytes.Clone(linux)
	bad[0] = 1
	var rej *CMRejectError
	if _, err := ParseCMRequest(bad); !errors.As(err, &rej) || rej.Status != CMRejectInvalidRecFmt {
		t.Fatalf("recfmt: %v", err)
	}
	if st, err := ParseCMReject(AppendCMReject(nil, CMRejectInvalidHSQSize)); err != nil || st != CMRejectInvalidHSQSize {
		t.Fatal(st, err)
	}
}

func TestBufferPool(t *testing.T) {
	p, err := newBufferPool(1<<20, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	type got struct{ off, cap int }
	var all []got
	for {
		b, off, ok := p.get(4096)
		if !ok {
			break
		}
		if off%4096 != 0 || len(b) != 4096 {
			t.Fatalf("buffer at %d len %d", off, len(b))
		}
		all = append(all, got{off, cap(b)})
	}
	if len(all) != 256 || p.used() != 1<<20 {
		t.Fatalf("%d buffers, %d used", len(all), p.used())
	}
	for _, g := range all {
		p.put(g.off, g.cap)
	}
	// Everything merged back: four 256 KiB blocks are available again.
	for i := 0; i < 4; i++ {
		if _, _, ok := p.get(256 << 10); !ok {
			t.Fatalf("block %d not merged back", i)
		}
	}
	if _, _, ok := p.get(300 << 10); ok {
		t.Fatal("got a buffer above the largest block")
	}
	a := testing.AllocsPerRun(100, func() {
		b, off, ok := p.get(8192)
		if ok {
			p.put(off, cap(b))
		}
	})
	if a != 0 {
		t.Fatalf("%v allocs", a)
	}
}

func TestReadWriteKeyedAndInCapsule(t *testing.T) {
	for _, async := range []bool{false, true} {
		for _, crc := range []CRCPolicy{CRCOff, CRCRequired} {
			t.Run(fmt.Sprintf("async=%v/crc=%v", async, crc), func(t *testing.T) {
				m := newMemCtrl(8 << 20)
				m.async = async
				ln := serve(t, ControllerConfig{Transport: TransportConfig{CRC: crc}}, m)
				q := dialQ(t, ln.Addr().String(), HostConfig{QID: 1, QueueSize: 32, InlineDataSize: DefaultInlineDataSize})
				if q.Accept().CRQSize != 32 {
					t.Fatalf("accept %+v", q.Accept())
				}
				for _, size := range []int{512, 4096, 8192, 128 << 10, 1 << 20} {
					w := &HostRequest{Data: pattern(size, byte(size)), Write: true}
					w.SQE.BuildWrite(1, 64, uint32(size/512))
					if err := do(t, q, w); err != nil {
						t.Fatalf("write %d: %v", size, err)
					}
					sgl := w.SQE.SGL1()
					if inCap := size <= DefaultInlineDataSize; inCap != (sgl.Identifier() == 0x01) {
						t.Fatalf("write of %d: SGL %#x", size, sgl.Identifier())
					}
					rd := &HostRequest{Data: make([]byte, size)}
					rd.SQE.BuildRead(1, 64, uint32(size/512))
					if err := do(t, q, rd); err != nil {
						t.Fatalf("read %d: %v", size, err)
					}
					if !bytes.Equal(rd.Data, w.Data) {
						t.Fatalf("read back %d bytes differ", size)
					}
				}
				// Every keyed command was answered with a Send with
				// Invalidate of exactly its STag; in-capsule writes had none.
				st := q.Stats()
				if st.Keyed != 8 || st.InCapsule != 2 || st.RemoteInvalidations != st.Keyed || st.LocalInvalidations != 0 || st.Completed != 10 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	}
}

func TestAdminQueueAndStatus(t *testing.T) {
	m := newMemCtrl(1 << 20)
	ln := serve(t, ControllerConfig{}, m)
	q := dialQ(t, ln.Addr().String(), HostConfig{QID: 0})
	if q.Size() != AdminQueueSize {
		t.Fatal(q.Size())
	}
	id := &HostRequest{Data: make([]byte, nvmeof.IdentifyDataSize)}
	id.SQE.BuildIdentify(nvmeof.CNSController, 0, 0, 0)
	if err := do(t, q, id); err != nil {
		t.Fatal(err)
	}
	if id.CQE.Result() != 0x1234 || id.Data[4095] != 0xff || id.CQE.SQID() != 0 {
		t.Fatalf("identify result %#x data %x", id.CQE.Result(), id.Data[4090:])
	}
	// The admin queue never sends in-capsule data: a 4 KiB write goes keyed.
	bad := &HostRequest{}
	bad.SQE.BuildGetFeatures(0x07, 0, 0)
	bad.SQE.SetOpcode(0x55)
	if err := do(t, q, bad); !errors.Is(err, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR) {
		t.Fatalf("bad opcode: %v", err)
	}
}

func TestSGLErrors(t *testing.T) {
	m := newMemCtrl(1 << 20)
	ln := serve(t, ControllerConfig{}, m)
	q := dialQ(t, ln.Addr().String(), HostConfig{QID: 1, QueueSize: 16, InlineDataSize: 4096})
	// Raw commands with hand-made SGLs go through a plain Send: build them
	// with the queue, then overwrite the SGL before the bytes leave. The
	// simplest way is a request whose Data is empty (null SGL) with the SGL
	// bytes set afterwards — so use the iwarp level through a second queue.
	cases := []struct {
		name string
		sgl  func(s *nvmeof.SGL)
		op   uint8
		want nvmeof.Status
	}{
		{"segment descriptor", func(s *nvmeof.SGL) { s.SetIdentifier(0x20); s.SetLength(512) }, nvmeof.NVMRead, nvmeof.StatusSGLInvalidType | nvmeof.StatusDNR},
		{"keyed bad subtype", func(s *nvmeof.SGL) { s.SetKeyed(0x1000, 512, 0x100, false); s.SetIdentifier(0x42) }, nvmeof.NVMRead, nvmeof.StatusInvalidField | nvmeof.StatusDNR},
		{"in-capsule for a read", func(s *nvmeof.SGL) { s.SetInCapsule(0, 512) }, nvmeof.NVMRead, nvmeof.StatusInvalidField | nvmeof.StatusDNR},
		{"in-capsule beyond the capsule", func(s *nvmeof.SGL) { s.SetInCapsule(0, 8192) }, nvmeof.NVMWrite, nvmeof.StatusSGLInvalidOffset | nvmeof.StatusDNR},
		{"keyed beyond MDTS", func(s *nvmeof.SGL) { s.SetKeyed(0x1000, 2<<20, 0x100, false) }, nvmeof.NVMRead, nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &HostRequest{}
			r.SQE.BuildRead(1, 0, 1)
			r.SQE.SetOpcode(tc.op)
			st := rawCommand(t, q, r, tc.sgl)
			if st != tc.want {
				t.Fatalf("status %v, want %v", st, tc.want)
			}
		})
	}
}

// rawCommand submits r with a hand-made SGL: it takes a slot like Submit
// and posts the SQE itself.
func rawCommand(t *testing.T, q *HostQueue, r *HostRequest, sgl func(*nvmeof.SGL)) nvmeof.Status {
	t.Helper()
	done := make(chan struct{})
	r.Done = func(*HostRequest) { close(done) }
	q.mu.Lock()
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.sqTail = (q.sqTail + 1) % uint16(q.size)
	s := &q.slots[i]
	s.req, s.usedMR = r, false
	s.gen++
	q.mu.Unlock()
	r.SQE.SetCID(uint16(s.gen&0xF)<<cidSlotBits | uint16(i))
	sgl(r.SQE.SGL1())
	s.sge[0] = r.SQE[:]
	s.wr = iwarp.SendWR{Opcode: iwarp.WRSend, Local: s.sge[:1]}
	if err := q.qp.PostSend(&s.wr); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(hang):
		t.Fatal("no completion")
	}
	return r.CQE.Status()
}

func TestManyOutstandingAndPoolPressure(t *testing.T) {
	m := newMemCtrl(16 << 20)
	m.async = true
	// A 1 MiB pool with 256 KiB transfers: at most four in flight, the
	// rest wait for buffers in order.
	ln := serve(t, ControllerConfig{IOPoolSize: 1 << 20, MaxTransferSize: 256 << 10}, m)
	q := dialQ(t, ln.Addr().String(), HostConfig{QID: 1, QueueSize: 64})
	const n = 63
	reqs := make([]*HostRequest, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range reqs {
		r := &HostRequest{Data: pattern(256<<10, byte(i)), Write: true, Done: func(*HostRequest) { wg.Done() }}
		r.SQE.BuildWrite(1, uint64(i*512), 512)
		reqs[i] = r
		if err := q.Submit(r); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	waitWG(t, &wg)
	for i, r := range reqs {
		if err := r.Status(); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	// Read everything back concurrently.
	wg.Add(n)
	for i := range reqs {
		r := &HostRequest{Data: make([]byte, 256<<10), Done: func(*HostRequest) { wg.Done() }}
		r.SQE.BuildRead(1, uint64(i*512), 512)
		reqs[i] = r
		if err := q.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	waitWG(t, &wg)
	for i, r := range reqs {
		if err := r.Status(); err != nil || !bytes.Equal(r.Data, pattern(256<<10, byte(i))) {
			t.Fatalf("read %d: %v", i, err)
		}
	}
}

func TestQueueFull(t *testing.T) {
	m := newMemCtrl(1 << 20)
	m.hold = make(chan *Request, 64)
	ln := serve(t, ControllerConfig{}, m)
	q := dialQ(t, ln.Addr().String(), HostConfig{QID: 1, QueueSize: 16})
	var wg sync.WaitGroup
	wg.Add(15)
	for i := 0; i < 15; i++ {
		r := &HostRequest{Data: make([]byte, 512), Done: func(*HostRequest) { wg.Done() }}
		r.SQE.BuildRead(1, 0, 1)
		if err := q.Submit(r); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	extra := &HostRequest{Done: func(*HostRequest) {}}
	extra.SQE.BuildFlush(1)
	if err := q.Submit(extra); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("16th command on a queue of 16: %v", err)
	}
	if err := q.Submit(&HostRequest{}); err == nil {
		t.Fatal("request without Done accepted")
	}
	for i := 0; i < 15; i++ {
		(<-m.hold).Complete(nvmeof.StatusSuccess)
	}
	waitWG(t, &wg)
	if err := do(t, q, extra); err != nil {
		t.Fatal(err)
	}
}

func waitWG(t testing.TB, wg *sync.WaitGroup) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(hang):
		t.Fatal("commands did not complete")
	}
}

func TestQueueSizeChecks(t *testing.T) {
	m := newMemCtrl(1 << 20)
	ln := serve(t, ControllerConfig{MaxQueueSize: 64}, m)
	ctx := context.Background()
	for _, tc := range []struct {
		qid, size int
		want      CMRejectStatus
	}{
		{0, 33, CMRejectInvalidHSQSize},
		{1, 65, CMRejectInvalidHSQSize},
	} {
		_, err := Dial(ctx, "tcp", ln.Addr().String(), HostConfig{QID: uint16(tc.qid), QueueSize: tc.size})
		var rej *CMRejectError
		if !errors.As(err, &rej) || rej.Status != tc.want {
			t.Errorf("qid %d size %d: %v", tc.qid, tc.size, err)
		}
	}
}

// TestHostSeesControllerLoss: commands outstanding when the connection goes
// complete with ErrQueueClosed.
func TestHostSeesControllerLoss(t *testing.T) {
	m := newMemCtrl(1 << 20)
	m.hold = make(chan *Request, 8)
	ln := serve(t, ControllerConfig{}, m)
	q := dialQ(t, ln.Addr().String(), HostConfig{QID: 1, QueueSize: 8})
	var wg sync.WaitGroup
	wg.Add(3)
	reqs := make([]*HostRequest, 3)
	for i := range reqs {
		reqs[i] = &HostRequest{Data: make([]byte, 4096), Done: func(*HostRequest) { wg.Done() }}
		reqs[i].SQE.BuildRead(1, 0, 8)
		if err := q.Submit(reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	var held []*Request
	for i := 0; i < 3; i++ {
		held = append(held, <-m.hold)
	}
	held[0].Queue().qp.Disconnect() // the controller goes away
	waitWG(t, &wg)
	for _, r := range reqs {
		if !errors.Is(r.Err, ErrQueueClosed) {
			t.Fatalf("err %v", r.Err)
		}
	}
	for _, r := range held {
		r.Complete(nvmeof.StatusSuccess) // completing on a dead queue just releases
	}
	<-q.Done()
	if err := q.Submit(&HostRequest{Done: func(*HostRequest) {}}); !errors.Is(err, ErrQueueClosed) {
		t.Fatalf("submit after close: %v", err)
	}
}

// TestHostErrorKeepsCause: a command failed by the queue's end carries the
// cause as a wrapped error (errors.Is/As reach it, e.g. an
// *iwarp.TerminateError), not only its text.
func TestHostErrorKeepsCause(t *testing.T) {
	m := newMemCtrl(1 << 20)
	m.hold = make(chan *Request, 8)
	ln := serve(t, ControllerConfig{}, m)
	q := dialQ(t, ln.Addr().String(), HostConfig{QID: 1, QueueSize: 8})
	done := make(chan struct{})
	r := &HostRequest{Data: make([]byte, 4096), Done: func(*HostRequest) { close(done) }}
	r.SQE.BuildRead(1, 0, 8)
	if err := q.Submit(r); err != nil {
		t.Fatal(err)
	}
	held := <-m.hold
	cause := errors.New("the cause")
	q.Abort(cause)
	<-done
	if !errors.Is(r.Err, ErrQueueClosed) || !errors.Is(r.Err, cause) {
		t.Fatalf("err %v: want ErrQueueClosed wrapping the cause", r.Err)
	}
	<-q.Done()
	if err := q.Submit(&HostRequest{Done: func(*HostRequest) {}}); !errors.Is(err, ErrQueueClosed) {
		t.Fatalf("submit after close: %v", err)
	}
	held.Complete(nvmeof.StatusSuccess)
}

// TestHostNudge: Nudge puts a zero-length RDMA Write on the wire, which a
// controller (here nvmeof/rdma's, on the iwarp engine) takes as a no-op.
func TestHostNudge(t *testing.T) {
	m := newMemCtrl(1 << 20)
	ln := serve(t, ControllerConfig{}, m)
	q := dialQ(t, ln.Addr().String(), HostConfig{QID: 1, QueueSize: 8})
	for i := 0; i < 3; i++ {
		if err := q.Nudge(); err != nil {
			t.Fatal(err)
		}
	}
	r := &HostRequest{Data: make([]byte, 512)}
	r.SQE.BuildRead(1, 0, 1)
	if err := do(t, q, r); err != nil {
		t.Fatalf("read after nudges: %v", err)
	}
}

func TestHostRejectsBogusCompletions(t *testing.T) {
	// A raw controller built on iwarp answers with a CQE whose CID matches
	// nothing: the host must tear the queue down.
	ln, err := iwarp.Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		cr, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		pd := iwarp.NewPD()
		cq := iwarp.NewCQ(16)
		qp, _ := iwarp.NewQP(iwarp.QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq})
		buf := make([]byte, 64)
		_ = qp.PostRecv(&iwarp.RecvWR{Buf: buf})
		_ = cr.Accept(qp, (&CMAccept{CRQSize: 8}).Append(nil))
		var wc [1]iwarp.WC
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		if _, err := cq.PollWait(ctx, wc[:]); err != nil {
			return
		}
		var cqe nvmeof.CQE
		cqe.SetCID(binary.LittleEndian.Uint16(buf[2:]) ^ 0x7)
		_ = qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRSend, Local: [][]byte{cqe[:]}})
		<-qp.Done()
	}()
	q, err := Dial(context.Background(), "tcp", ln.Addr().String(), HostConfig{QID: 1, QueueSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	r := &HostRequest{}
	r.SQE.BuildFlush(1)
	if err := do(t, q, r); !errors.Is(err, ErrQueueClosed) {
		t.Fatalf("want queue closed, got %v", err)
	}
	if !errors.Is(q.Err(), q.Err()) || q.Err() == nil {
		t.Fatal("no error recorded")
	}
	<-srvDone
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13) + seed
	}
	return b
}

// TestSQFlowControlDisabled: a controller that reports SQHD 0xFFFF (SQ flow
// control disabled) is bounded by the slots only; and a closed queue's
// STags leave the shared PD.
func TestSQFlowControlDisabled(t *testing.T) {
	ln, err := iwarp.Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		cr, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		pd := iwarp.NewPD()
		var qp *iwarp.QP
		bufs := make([][]byte, 8)
		cqes := make([]nvmeof.CQE, 8)
		cq := iwarp.NewCQHandler(func(wc *iwarp.WC) {
			if wc.Opcode != iwarp.WCRecv || wc.Status != iwarp.WCSuccess {
				return
			}
			b := bufs[wc.ID]
			cqe := &cqes[wc.ID]
			cqe.Reset()
			cqe.SetCID(binary.LittleEndian.Uint16(b[2:]))
			cqe.SetSQHead(0xFFFF)
			_ = qp.PostRecv(&iwarp.RecvWR{ID: wc.ID, Buf: b})
			_ = qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRSend, Local: [][]byte{cqe[:]}})
		})
		qp, _ = iwarp.NewQP(iwarp.QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq})
		for i := range bufs {
			bufs[i] = make([]byte, 64)
			_ = qp.PostRecv(&iwarp.RecvWR{ID: uint64(i), Buf: bufs[i]})
		}
		_ = cr.Accept(qp, (&CMAccept{CRQSize: 8}).Append(nil))
		<-qp.Done()
	}()
	pd := NewPD()
	q, err := Dial(context.Background(), "tcp", ln.Addr().String(), HostConfig{QID: 1, QueueSize: 8, PD: pd})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ { // five times around an 8-entry queue
		r := &HostRequest{}
		r.SQE.BuildFlush(1)
		if err := do(t, q, r); err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	q.Close()
	<-srvDone
	// Every slot MR was deregistered.
	if n := pd.pd.Regions(); n != 0 {
		t.Fatalf("%d regions left in the PD after the queue closed", n)
	}
}

// TestSubmitRacingQueueEnd: commands are submitted from several goroutines
// while the queue ends under them. Whatever the interleaving, a Submit that
// returns nil gets exactly one Done and a Submit that returns an error gets
// none (the initiator sends a command again on that promise: a second Done,
// or a Done after a failed Submit, is a command finished twice).
func TestSubmitRacingQueueEnd(t *testing.T) {
	m := newMemCtrl(1 << 20)
	m.async = true
	ln := serve(t, ControllerConfig{}, m)
	type sub struct {
		r     HostRequest
		ok    bool // Submit returned nil
		dones atomic.Int32
	}
	const rounds, submitters = 40, 4
	for round := 0; round < rounds; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		q, err := Dial(ctx, "tcp", ln.Addr().String(), HostConfig{QID: 1, QueueSize: 32, InlineDataSize: 4096})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu   sync.Mutex
			subs []*sub
			wg   sync.WaitGroup
		)
		start := make(chan struct{})
		for g := 0; g < submitters; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; ; i++ {
					s := &sub{}
					s.r.Done = func(*HostRequest) { s.dones.Add(1) }
					switch i % 3 {
					case 0: // keyed: a fresh STag per command
						s.r.Data = make([]byte, 8192)
						s.r.SQE.BuildRead(1, 0, 16)
					case 1: // in-capsule
						s.r.Data, s.r.Write = make([]byte, 512), true
						s.r.SQE.BuildWrite(1, 0, 1)
					default: // no data
						s.r.SQE.BuildFlush(1)
					}
					err := q.Submit(&s.r)
					s.ok = err == nil
					mu.Lock()
					subs = append(subs, s)
					mu.Unlock()
					if err != nil && !errors.Is(err, ErrQueueFull) {
						return // the queue has ended
					}
				}
			}()
		}
		close(start)
		// End the queue while the submitters are busy: the later rounds
		// end it sooner.
		for i := 0; i < (rounds-round)*20; i++ {
			runtime.Gosched()
		}
		q.Abort(errors.New("test: queue ended"))
		wg.Wait()
		<-q.Done()
		for i, s := range subs {
			want := int32(0)
			if s.ok {
				want = 1
			}
			if n := s.dones.Load(); n != want {
				t.Fatalf("round %d, command %d: Submit returned ok=%v, Done called %d times", round, i, s.ok, n)
			}
		}
	}
}

// TestCRCPolicyValues: the binding's CRC policies convert to the engine's
// by value (CRCPolicy.engine).
func TestCRCPolicyValues(t *testing.T) {
	for p, want := range map[CRCPolicy]iwarp.CRCPolicy{CRCOff: iwarp.CRCOff, CRCOffered: iwarp.CRCOffered, CRCRequired: iwarp.CRCRequired} {
		if p.engine() != want || p.String() != want.String() {
			t.Errorf("%v: engine %v", p, p.engine())
		}
		if q, err := ParseCRCPolicy(p.String()); err != nil || q != p {
			t.Errorf("ParseCRCPolicy(%q) = %v, %v", p.String(), q, err)
		}
	}
	if _, err := ParseCRCPolicy("sometimes"); err == nil {
		t.Error("ParseCRCPolicy accepted nonsense")
	}
}

// TestAnswerHoldsContext (issue 21): Answer answers a command at once (the
// host gets the status, and a read's buffer no data) while its context and
// registered data buffer stay held until Release: commands that arrive
// meanwhile never get that context or buffer (the holder, a backend that
// has not returned, still writes into it), no completion of the held
// context is stale, and Release gives both back. A command whose data came
// in its capsule is not answered early (its data is in a receive buffer the
// host's next command would reuse). Before, the binding had only Complete,
// which freed the context once the answer went out.
func TestAnswerHoldsContext(t *testing.T) {
	m := newMemCtrl(4 << 20)
	m.hold = make(chan *Request, 64)
	m.holdW = make(chan *Request, 64)
	var mu sync.Mutex
	held := map[int]bool{}
	var reused []int
	m.seen = func(r *Request) {
		mu.Lock()
		if held[r.Index()] {
			reused = append(reused, r.Index())
		}
		mu.Unlock()
	}
	ln := serve(t, ControllerConfig{}, m)
	const qsize = 16
	q := dialQ(t, ln.Addr().String(), HostConfig{QID: 1, QueueSize: qsize, InlineDataSize: DefaultInlineDataSize})

	// Eight reads park in the controller; each is answered early with
	// ANA Inaccessible, after its data buffer was filled with a canary.
	const n = 8
	canary := pattern(8192, 0xA5)
	var wg sync.WaitGroup
	wg.Add(n)
	reads := make([]*HostRequest, n)
	for i := range reads {
		r := &HostRequest{Data: bytes.Repeat([]byte{0xEE}, 8192), Done: func(*HostRequest) { wg.Done() }}
		r.SQE.BuildRead(1, uint64(i*16), 16)
		reads[i] = r
		if err := q.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	var parked []*Request
	for range n {
		var r *Request
		select {
		case r = <-m.hold:
		case <-time.After(hang):
			t.Fatal("the reads did not reach the controller")
		}
		copy(r.Data(), canary)
		mu.Lock()
		held[r.Index()] = true
		mu.Unlock()
		if !r.Answer(nvmeof.StatusANAInaccessible) {
			t.Fatal("Answer of a keyed read refused")
		}
		if r.Answer(nvmeof.StatusANAInaccessible) {
			t.Fatal("a second Answer accepted")
		}
		parked = append(parked, r)
	}
	waitWG(t, &wg)
	for i, r := range reads {
		if st, ok := r.Status().(nvmeof.Status); !ok || st != nvmeof.StatusANAInaccessible {
			t.Fatalf("read %d answered early: %v, want ANA Inaccessible", i, r.Status())
		}
		if !bytes.Equal(r.Data, bytes.Repeat([]byte{0xEE}, 8192)) {
			t.Fatalf("read %d: data reached the host's buffer with an error answer", i)
		}
	}
	// Many more commands than the queue holds, through every free
	// context: writes of another pattern, which would overwrite a held
	// buffer if it were given out.
	const more = 4 * qsize
	wg.Add(more)
	for i := range more {
		w := &HostRequest{Data: pattern(8192, byte(i)), Write: true, Done: func(*HostRequest) { wg.Done() }}
		w.SQE.BuildWrite(1, uint64(i*16), 16)
		for {
			err := q.Submit(w)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrQueueFull) {
				t.Fatal(err)
			}
			runtime.Gosched()
		}
		go func() { (<-m.holdW).Complete(nvmeof.StatusSuccess) }()
	}
	waitWG(t, &wg)
	mu.Lock()
	if len(reused) > 0 {
		t.Fatalf("held contexts %v given to new commands before Release", reused)
	}
	mu.Unlock()
	for i, r := range parked {
		if !bytes.Equal(r.Data(), canary) {
			t.Fatalf("held read %d: its data buffer was reused before Release", i)
		}
	}
	// An in-capsule write answered early keeps its data, which is in the
	// receive buffer, until Release, while more in-capsule writes go
	// through every receive slot (one would overwrite it if the slot
	// were given back with it).
	icData := pattern(512, 0x3C)
	w := &HostRequest{Data: icData, Write: true}
	w.SQE.BuildWrite(1, 0, 1)
	wdone := make(chan struct{})
	w.Done = func(*HostRequest) { close(wdone) }
	if err := q.Submit(w); err != nil {
		t.Fatal(err)
	}
	var wr *Request
	select {
	case wr = <-m.holdW:
	case <-time.After(hang):
		t.Fatal("the in-capsule write did not reach the controller")
	}
	if !wr.inCap {
		t.Fatal("the 512-byte write did not come in its capsule")
	}
	mu.Lock()
	held[wr.Index()] = true
	mu.Unlock()
	if !wr.Answer(nvmeof.StatusANAInaccessible) {
		t.Fatal("Answer of an in-capsule write refused")
	}
	select {
	case <-wdone:
	case <-time.After(hang):
		t.Fatal("the in-capsule write was not answered")
	}
	if st, ok := w.Status().(nvmeof.Status); !ok || st != nvmeof.StatusANAInaccessible {
		t.Fatalf("in-capsule write answered early: %v", w.Status())
	}
	for i := range 4 * qsize {
		w := &HostRequest{Data: pattern(512, byte(i)), Write: true}
		w.SQE.BuildWrite(1, uint64(i), 1)
		go func() { (<-m.holdW).Complete(nvmeof.StatusSuccess) }()
		if err := do(t, q, w); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(reused) > 0 {
		t.Fatalf("held contexts %v given to new commands before Release", reused)
	}
	mu.Unlock()
	if !bytes.Equal(wr.Data(), icData) || wr.SQE().Opcode() != nvmeof.NVMWrite {
		t.Fatal("the held in-capsule write's data or SQE changed before Release")
	}
	parked = append(parked, wr)

	cq := parked[0].Queue()
	before := cq.Stats()
	if before.PoolBytesInUse < n*8192 { // the in-capsule write holds no pool buffer
		t.Fatalf("pool bytes in use %d with %d held 8 KiB buffers", before.PoolBytesInUse, n)
	}
	mu.Lock()
	clear(held)
	mu.Unlock()
	for _, r := range parked {
		r.Release()
		r.Release() // a second Release does nothing
	}
	waitFor(t, "the held buffers back in the pool", func() bool { return cq.Stats().PoolBytesInUse == 0 })
	if st := cq.Stats(); st.StaleCompletions != 0 {
		t.Fatalf("stale completions %d", st.StaleCompletions)
	}
	// The queue goes on with every context.
	for i := range qsize - 1 {
		w := &HostRequest{Data: pattern(8192, byte(i)), Write: true}
		w.SQE.BuildWrite(1, uint64(i*16), 16)
		go func() { (<-m.holdW).Complete(nvmeof.StatusSuccess) }()
		if err := do(t, q, w); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls cond until it holds, failing the test after hang.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

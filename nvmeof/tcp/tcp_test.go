package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawtcp"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// memHandler is controller logic over a RAM disk of 1 MiB: NVM Write and
// Read at SLBA × 512, everything else succeeds.
type memHandler struct {
	mu     sync.Mutex
	mem    []byte
	closed chan error
}

func newMemHandler() *memHandler {
	return &memHandler{mem: make([]byte, 1<<20), closed: make(chan error, 1)}
}

func (m *memHandler) HandleCommand(r *Request) {
	sqe := r.SQE()
	if sqe.IsFabrics() {
		r.FetchData()
		return
	}
	switch sqe.Opcode() {
	case nvmeof.NVMWrite:
		r.FetchData()
	case nvmeof.NVMRead:
		off := sqe.RWCmd().SLBA() * 512
		if off+uint64(len(r.Data())) > uint64(len(m.mem)) {
			r.Complete(nvmeof.StatusLBAOutOfRange)
			return
		}
		m.mu.Lock()
		copy(r.Data(), m.mem[off:])
		m.mu.Unlock()
		r.Complete(nvmeof.StatusSuccess)
	default:
		r.Complete(nvmeof.StatusSuccess)
	}
}

func (m *memHandler) DataReady(r *Request, err error) {
	if err != nil {
		r.Complete(nvmeof.StatusFromError(err))
		return
	}
	sqe := r.SQE()
	if sqe.IsFabrics() {
		_ = r.q.Admit()
		r.Complete(nvmeof.StatusSuccess)
		return
	}
	off := sqe.RWCmd().SLBA() * 512
	if off+uint64(len(r.Data())) > uint64(len(m.mem)) {
		r.Complete(nvmeof.StatusLBAOutOfRange)
		return
	}
	m.mu.Lock()
	copy(m.mem[off:], r.Data())
	m.mu.Unlock()
	r.Complete(nvmeof.StatusSuccess)
}

func (m *memHandler) QueueClosed(q *ControllerQueue, err error) { m.closed <- err }

// serve listens on loopback and serves every queue with h.
func serve(t testing.TB, cfg Config, h Handler) *Listener {
	t.Helper()
	ln, err := Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			if _, err := r.Accept(h); err != nil {
				t.Error(err)
			}
		}
	}()
	t.Cleanup(func() { cancel(); _ = ln.Close(); <-done })
	return ln
}

// dial is a raw NVMe/TCP host on ln, after ICReq/ICResp.
func dial(t *testing.T, ln *Listener, d wire.Digests) *rawtcp.Host {
	return rawtcp.Dial(t, ln.Addr().String(), d)
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// TestLoopbackIO: a host connects an I/O queue, writes in-capsule and
// through an R2T (several H2CData PDUs), reads back through C2HData, with
// and without header and data digests.
func TestLoopbackIO(t *testing.T) {
	for _, d := range []wire.Digests{{}, {Header: true}, {Data: true}, {Header: true, Data: true}} {
		t.Run(map[bool]string{false: "hdgst-off", true: "hdgst-on"}[d.Header]+"/"+map[bool]string{false: "ddgst-off", true: "ddgst-on"}[d.Data], func(t *testing.T) {
			m := newMemHandler()
			ln := serve(t, Config{MaxH2CData: 32 << 10}, m)
			h := dial(t, ln, d)
			h.Connect(1, 32, "", 0, 0)
			small := pattern(4096, 1)
			cid := h.NextCID()
			h.Capsule(rawtcp.RWSQE(nvmeof.NVMWrite, cid, 0, len(small), true), small)
			if st := h.CQE(cid, nil); st != nvmeof.StatusSuccess {
				t.Fatalf("in-capsule write: %v", st)
			}
			big := pattern(200<<10, 2)
			if st := h.WriteR2T(8, big, 32<<10); st != nvmeof.StatusSuccess {
				t.Fatalf("R2T write: %v", st)
			}
			got := make([]byte, 4096+len(big))
			if st := h.Read(0, got); st != nvmeof.StatusSuccess {
				t.Fatalf("read: %v", st)
			}
			if !bytes.Equal(got[:4096], small) || !bytes.Equal(got[4096:], big) {
				t.Fatal("read back differs from what was written")
			}
		})
	}
}

// queueHandler is memHandler that also hands out the I/O queue.
type queueHandler struct {
	*memHandler
	q chan *ControllerQueue
}

func (h queueHandler) HandleCommand(r *Request) {
	if r.SQE().IsFabrics() && r.Queue().QID() != 0 {
		select {
		case h.q <- r.Queue():
		default:
		}
	}
	h.memHandler.HandleCommand(r)
}

// TestResponsesBatched: the responses to a burst of commands that arrived
// together go out in fewer writes than responses (one writev for the
// batch), each command still answered with its data and a CapsuleResp,
// for reads (C2HData + CapsuleResp) and in-capsule writes.
func TestResponsesBatched(t *testing.T) {
	m := queueHandler{newMemHandler(), make(chan *ControllerQueue, 1)}
	ln := serve(t, Config{}, m)
	h := dial(t, ln, wire.Digests{})
	h.Connect(1, 32, "", 0, 0)
	q := <-m.q
	const n = 16
	want := pattern(n*512, 3)
	copy(m.mem, want)
	for _, write := range []bool{false, true} {
		before := q.Stats()
		var burst []byte
		for i := range n {
			sqe := rawtcp.RWSQE(nvmeof.NVMRead, uint16(100+i), uint64(i), 512, false)
			var data []byte
			if write {
				sqe = rawtcp.RWSQE(nvmeof.NVMWrite, uint16(100+i), uint64(i), 512, true)
				data = want[i*512 : (i+1)*512]
			}
			burst = h.AppendPDU(burst, wire.TypeCapsuleCmd, 0, sqe[:], data)
		}
		h.Send(burst) // one write: the commands arrive together
		got := make([]byte, n*512)
		for i := range n {
			into := got[i*512 : (i+1)*512]
			if write {
				into = nil
			}
			if st := h.CQE(uint16(100+i), into); st != nvmeof.StatusSuccess {
				t.Fatalf("command %d: %v", i, st)
			}
		}
		if !write && !bytes.Equal(got, want) {
			t.Fatal("read data differs")
		}
		after := q.Stats()
		pdus, writes := after.PDUsSent-before.PDUsSent, after.Writes-before.Writes
		t.Logf("write=%v: %d commands: %d PDUs sent in %d writes", write, n, pdus, writes)
		if writes >= n {
			t.Errorf("write=%v: %d responses took %d writes: not batched", write, n, writes)
		}
	}
}

// TestHostile: PDUs that break the protocol end the queue with the
// C2HTermReq the specification names (TCP 1.0 §3.6.2.9), stalls with a
// close within their bounds.
func TestHostile(t *testing.T) {
	// The stall cases wait for short timeouts (stall); the protocol cases
	// have timeouts they never reach (cfg), so that a loaded machine that
	// delays the raw host cannot make a timeout close the queue before the
	// C2HTermReq the case looks for.
	cfg := Config{ConnectTimeout: time.Minute, PDUTimeout: time.Minute, MaxH2CData: 8192}
	stall := Config{ConnectTimeout: 300 * time.Millisecond, PDUTimeout: 300 * time.Millisecond, MaxH2CData: 8192}
	var startWith func(t *testing.T, cfg Config, d wire.Digests) (*rawtcp.Host, *memHandler)
	start := func(t *testing.T, d wire.Digests) (*rawtcp.Host, *memHandler) {
		return startWith(t, cfg, d)
	}
	startWith = func(t *testing.T, cfg Config, d wire.Digests) (*rawtcp.Host, *memHandler) {
		m := newMemHandler()
		ln := serve(t, cfg, m)
		h := dial(t, ln, d)
		h.Connect(1, 32, "", 0, 0)
		return h, m
	}
	t.Run("bad-HLEN", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		b := h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, make([]byte, nvmeof.SQESize), nil)
		b[2] = 40
		h.Send(b)
		if fes, fei := h.TermReq(); fes != wire.FESInvalidHeaderField || fei != 2 {
			t.Fatalf("FES %v FEI %d, want invalid header field at 2 (HLEN)", fes, fei)
		}
	})
	t.Run("PLEN-beyond-IOCCSZ", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		b := h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, rawtcp.RWSQE(nvmeof.NVMWrite, 9, 0, 4096, true)[:], nil)
		// PLEN says 1 MiB of in-capsule data follows; none does.
		binary.LittleEndian.PutUint32(b[4:], 1<<20)
		b[3] = wire.CapsuleCmdHLen
		h.Send(b)
		if fes, _ := h.TermReq(); fes != wire.FESDataLimitExceeded {
			t.Fatalf("FES %v, want data transfer limit exceeded", fes)
		}
	})
	t.Run("PLEN-short-stall", func(t *testing.T) {
		h, _ := startWith(t, stall, wire.Digests{})
		b := h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, rawtcp.RWSQE(nvmeof.NVMWrite, 9, 0, 4096, true)[:], make([]byte, 4096))
		h.Send(b[:len(b)-100]) // the rest never comes
		h.ExpectClose()
	})
	t.Run("H2CData-outside-R2T", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		h.Capsule(rawtcp.RWSQE(nvmeof.NVMWrite, 7, 0, 8192, false), nil)
		hd, hdr, _ := h.Recv()
		if hd.Type != wire.TypeR2T {
			t.Fatalf("%s, want R2T", hd.Type)
		}
		r2t := (*wire.DataHeader)(hdr[:wire.DataHLen])
		h.SendH2C(wire.FlagLastPDU, 7, r2t.TTag(), 4096, make([]byte, 8192))
		if fes, _ := h.TermReq(); fes != wire.FESDataOutOfRange {
			t.Fatalf("FES %v, want data transfer out of range", fes)
		}
	})
	t.Run("H2CData-wrong-TTAG", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		h.SendH2C(wire.FlagLastPDU, 7, 3, 0, make([]byte, 512))
		if fes, fei := h.TermReq(); fes != wire.FESInvalidHeaderField || fei != 10 {
			t.Fatalf("FES %v FEI %d, want invalid header field at 10 (TTAG)", fes, fei)
		}
	})
	t.Run("H2CData-beyond-MAXH2CDATA", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		h.Capsule(rawtcp.RWSQE(nvmeof.NVMWrite, 7, 0, 16384, false), nil)
		_, hdr, _ := h.Recv()
		r2t := (*wire.DataHeader)(hdr[:wire.DataHLen])
		h.SendH2C(wire.FlagLastPDU, 7, r2t.TTag(), 0, make([]byte, 16384))
		if fes, _ := h.TermReq(); fes != wire.FESDataLimitExceeded {
			t.Fatalf("FES %v, want data transfer limit exceeded", fes)
		}
	})
	t.Run("header-digest", func(t *testing.T) {
		h, _ := start(t, wire.Digests{Header: true})
		b := h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, rawtcp.RWSQE(nvmeof.NVMRead, 5, 0, 512, false)[:], nil)
		b[wire.CapsuleCmdHLen] ^= 1
		h.Send(b)
		if fes, _ := h.TermReq(); fes != wire.FESHeaderDigestError {
			t.Fatalf("FES %v, want header digest error", fes)
		}
	})
	t.Run("data-digest-H2CData", func(t *testing.T) {
		h, _ := start(t, wire.Digests{Data: true})
		h.Capsule(rawtcp.RWSQE(nvmeof.NVMWrite, 7, 0, 4096, false), nil)
		_, hdr, _ := h.Recv()
		r2t := (*wire.DataHeader)(hdr[:wire.DataHLen])
		var dh [wire.DataHLen]byte
		wire.PutDataHeader(dh[:], wire.Header{}, 7, r2t.TTag(), 0, 4096)
		b := h.AppendPDU(nil, wire.TypeH2CData, wire.FlagLastPDU, dh[wire.CommonHeaderSize:], make([]byte, 4096))
		b[len(b)-1] ^= 0xFF
		h.Send(b)
		// The command fails with a transient transport error; the queue
		// goes on.
		if st := h.CQE(7, nil); st.Code() != nvmeof.StatusTransientTransportError {
			t.Fatalf("status %v, want transient transport error", st)
		}
		if st := h.Read(0, make([]byte, 512)); st != nvmeof.StatusSuccess {
			t.Fatalf("read after the digest error: %v", st)
		}
	})
	t.Run("R2T-unanswered", func(t *testing.T) {
		h, _ := startWith(t, stall, wire.Digests{})
		h.Capsule(rawtcp.RWSQE(nvmeof.NVMWrite, 7, 0, 8192, false), nil)
		if hd, _, _ := h.Recv(); hd.Type != wire.TypeR2T {
			t.Fatalf("%s, want R2T", hd.Type)
		}
		h.ExpectClose() // no H2CData ever comes
	})
	t.Run("stalled-ICReq", func(t *testing.T) {
		ln := serve(t, stall, newMemHandler())
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write(wire.NewICReq(0, wire.Digests{}, 0)[:50])
		h := rawtcp.New(t, c, wire.Digests{})
		h.ExpectClose()
	})
	t.Run("no-Connect-after-ICResp", func(t *testing.T) {
		ln := serve(t, stall, newMemHandler())
		h := dial(t, ln, wire.Digests{})
		h.ExpectClose()
	})
	t.Run("CapsuleCmd-before-ICReq", func(t *testing.T) {
		ln := serve(t, cfg, newMemHandler())
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		h := rawtcp.New(t, c, wire.Digests{})
		h.Send(h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, make([]byte, nvmeof.SQESize), nil))
		if fes, _ := h.TermReq(); fes != wire.FESSequenceError {
			t.Fatalf("FES %v, want PDU sequence error", fes)
		}
	})
	t.Run("H2CTermReq", func(t *testing.T) {
		h, m := start(t, wire.Digests{})
		h.Send(wire.AppendTermReq(nil, wire.TypeH2CTermReq, wire.FESInvalidHeaderField, 0, nil))
		h.ExpectClose()
		select {
		case err := <-m.closed:
			if !errors.Is(err, errHostTerminated) {
				t.Fatalf("queue ended with %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("QueueClosed not called")
		}
	})
}

// TestAllocsPerIO: a read and a write in steady state allocate nothing
// (the raw host of the test included).
func TestAllocsPerIO(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tc := range []struct {
		d    wire.Digests
		poll time.Duration
	}{{wire.Digests{}, 0}, {wire.Digests{Header: true, Data: true}, 0}, {wire.Digests{}, 50 * time.Microsecond}, {wire.Digests{Header: true, Data: true}, 50 * time.Microsecond}} {
		d := tc.d
		m := newMemHandler()
		ln := serve(t, Config{BusyPoll: tc.poll}, m)
		h := dial(t, ln, d)
		h.Connect(1, 32, "", 0, 0)
		buf := make([]byte, 64<<10)
		small := make([]byte, 4096)
		rd := rawtcp.RWSQE(nvmeof.NVMRead, 100, 0, len(buf), false)
		wr := rawtcp.RWSQE(nvmeof.NVMWrite, 101, 0, len(small), true)
		once := func() {
			h.Capsule(rd, nil)
			if st := h.CQE(100, buf); st != nvmeof.StatusSuccess {
				t.Fatal(st)
			}
			h.Capsule(wr, small)
			if st := h.CQE(101, nil); st != nvmeof.StatusSuccess {
				t.Fatal(st)
			}
		}
		once()
		if n := testing.AllocsPerRun(200, once); n > 0 {
			t.Errorf("digests %+v, busy poll %v: %.1f allocations per read+write, want 0", d, tc.poll, n)
		}
	}
}

// TestListenerCloseInitializing: closing the listener does not wait for
// connections stalled before their first command (their connect timeout
// here is an hour).
func TestListenerCloseInitializing(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0", Config{ConnectTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write(wire.NewICReq(0, wire.Digests{}, 0)[:]) // then no Connect
	var b [wire.ICSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("ICResp: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = ln.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Listener.Close waits for a connection stalled before its Connect")
	}
	h := rawtcp.New(t, c, wire.Digests{})
	h.ExpectClose()
}

// TestAdmittedOutlivesConnectTimeout: once the controller admitted the
// queue, the connect timeout no longer runs: an idle host (the keep-alive's
// business) keeps its queue past it.
func TestAdmittedOutlivesConnectTimeout(t *testing.T) {
	m := newMemHandler()
	ln := serve(t, Config{ConnectTimeout: 100 * time.Millisecond, PDUTimeout: 100 * time.Millisecond}, m)
	h := dial(t, ln, wire.Digests{})
	h.Connect(1, 32, "", 0, 0)
	time.Sleep(time.Second) // ten connect timeouts, idle between PDUs
	if st := h.Read(0, make([]byte, 4096)); st != nvmeof.StatusSuccess {
		t.Fatalf("read after the connect timeout: %v", st)
	}
	select {
	case err := <-m.closed:
		t.Fatalf("the queue ended: %v", err)
	default:
	}
}

// dataHandler is memHandler that reports the errors DataReady gets.
type dataHandler struct {
	*memHandler
	errs chan error
}

func (h dataHandler) DataReady(r *Request, err error) {
	if err != nil {
		h.errs <- err
	}
	h.memHandler.DataReady(r, err)
}

// TestR2TEndsWithQueue: a write waiting for the host's data (R2T sent, no
// H2CData) when the connection ends is handed back to the controller logic
// with an error at once, so that it completes and releases what it holds;
// before, it stayed held until the PDU timeout's timer, which only closed
// the queue again (a removed port's queue then kept its namespace busy and
// the target's Shutdown waited for it).
func TestR2TEndsWithQueue(t *testing.T) {
	m := dataHandler{newMemHandler(), make(chan error, 4)}
	ln := serve(t, Config{PDUTimeout: time.Hour}, m)
	h := dial(t, ln, wire.Digests{})
	h.Connect(1, 32, "", 0, 0)
	h.Capsule(rawtcp.RWSQE(nvmeof.NVMWrite, 77, 0, 64<<10, false), nil)
	if hd, _, _ := h.Recv(); hd.Type != wire.TypeR2T {
		t.Fatalf("got %s, want the R2T", hd.Type)
	}
	_ = h.Conn.Close()
	select {
	case err := <-m.errs:
		if !strings.Contains(err.Error(), "R2T") {
			t.Errorf("DataReady error %v", err)
		}
	case <-time.After(time.Minute): // a hang guard (the PDU timeout is an hour)
		t.Fatal("the write waiting for its data was not handed back when the queue ended")
	}
}

// holdHandler is memHandler whose reads park in hold, and which records
// every command's context as it arrives.
type holdHandler struct {
	*memHandler
	hold chan *Request
	seen func(*Request)
}

func (h holdHandler) HandleCommand(r *Request) {
	if !r.SQE().IsFabrics() {
		h.seen(r)
		if r.SQE().Opcode() == nvmeof.NVMRead {
			h.hold <- r
			return
		}
	}
	h.memHandler.HandleCommand(r)
}

// TestAnswerHoldsContext (issue 21): Answer answers a command at once (a
// CapsuleResp with the status, no data) while its context and data buffer
// stay held until Release: commands that arrive meanwhile never get that
// context or buffer (the holder, a backend that has not returned, still
// writes into it), and Release gives them back: the queue then runs every
// context again. Before, the binding had only Complete, which freed the
// context once the answer was written.
func TestAnswerHoldsContext(t *testing.T) {
	var mu sync.Mutex
	held := map[int]bool{}
	var reused []int
	m := holdHandler{newMemHandler(), make(chan *Request, 16), func(r *Request) {
		mu.Lock()
		if held[r.Index()] {
			reused = append(reused, r.Index())
		}
		mu.Unlock()
	}}
	ln := serve(t, Config{}, m)
	h := dial(t, ln, wire.Digests{})
	const qsize = 16
	h.Connect(1, qsize, "", 0, 0)
	const n = 8
	canary := pattern(4096, 0xA5)
	var parked []*Request
	for i := range n {
		cid := h.NextCID()
		h.Capsule(rawtcp.RWSQE(nvmeof.NVMRead, cid, uint64(i*8), 4096, false), nil)
		var r *Request
		select {
		case r = <-m.hold:
		case <-time.After(time.Minute):
			t.Fatal("the read did not reach the controller")
		}
		copy(r.Data(), canary)
		mu.Lock()
		held[r.Index()] = true
		mu.Unlock()
		if !r.Answer(nvmeof.StatusANAInaccessible) {
			t.Fatal("Answer refused")
		}
		if r.Answer(nvmeof.StatusANAInaccessible) {
			t.Fatal("a second Answer accepted")
		}
		r.Complete(nvmeof.StatusSuccess) // after Answer: nothing
		if st := h.CQE(cid, nil); st != nvmeof.StatusANAInaccessible {
			t.Fatalf("read %d answered early: %v, want ANA Inaccessible", i, st)
		}
		parked = append(parked, r)
	}
	// Many commands through every free context: writes of another
	// pattern, which would overwrite a held buffer if it were given out.
	for i := range 4 * qsize {
		data := pattern(4096, byte(i))
		cid := h.NextCID()
		h.Capsule(rawtcp.RWSQE(nvmeof.NVMWrite, cid, uint64(i*8), len(data), true), data)
		if st := h.CQE(cid, nil); st != nvmeof.StatusSuccess {
			t.Fatalf("write %d: %v", i, st)
		}
	}
	mu.Lock()
	if len(reused) > 0 {
		t.Fatalf("held contexts %v given to new commands before Release", reused)
	}
	clear(held)
	mu.Unlock()
	cq := parked[0].q
	// The last write's context goes back to the pool just after its
	// response is written: wait for it (the host may read the response
	// first).
	deadline := time.Now().Add(time.Minute)
	for len(cq.free) < qsize-n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if free := len(cq.free); free != qsize-n {
		t.Fatalf("%d free contexts with %d of %d held", free, n, qsize)
	}
	for i, r := range parked {
		if !bytes.Equal(r.Data(), canary) {
			t.Fatalf("held read %d: its data buffer was reused before Release", i)
		}
		r.Release()
		r.Release() // a second Release does nothing
	}
	if free := len(cq.free); free != qsize {
		t.Fatalf("%d free contexts of %d after Release", free, qsize)
	}
	// Every context again: a burst of a full queue of writes.
	var burst []byte
	for i := range qsize - 1 {
		sqe := rawtcp.RWSQE(nvmeof.NVMWrite, uint16(1000+i), uint64(i), 512, true)
		burst = h.AppendPDU(burst, wire.TypeCapsuleCmd, 0, sqe[:], pattern(512, byte(i)))
	}
	h.Send(burst)
	for i := range qsize - 1 {
		if st := h.CQE(uint16(1000+i), nil); st != nvmeof.StatusSuccess {
			t.Fatalf("burst write %d: %v", i, st)
		}
	}
}

package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

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

// host is a raw NVMe/TCP host built on the wire package.
type host struct {
	t    *testing.T
	c    net.Conn
	d    wire.Digests
	cid  uint16
	pdu  []byte
	sbuf []byte
}

func dial(t *testing.T, ln *Listener, d wire.Digests) *host {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	h := &host{t: t, c: c, d: d, pdu: make([]byte, 2<<20), sbuf: make([]byte, 0, 2<<20)}
	if _, err := c.Write(wire.NewICReq(0, d, 0)[:]); err != nil {
		t.Fatal(err)
	}
	var b [wire.ICSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("ICResp: %v", err)
	}
	resp, err := wire.ParseICResp(b[:], d)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Digests() != d {
		t.Fatalf("digests %+v granted, %+v asked", resp.Digests(), d)
	}
	return h
}

// appendPDU appends a PDU of type typ with header fields hdr (after the
// common header) and data.
func (h *host) appendPDU(dst []byte, typ wire.PDUType, flags uint8, hdr []byte, data []byte) []byte {
	ch := wire.NewHeader(typ, flags, h.d, uint32(len(data)), 0)
	start := len(dst)
	var cb [wire.CommonHeaderSize]byte
	ch.Put(cb[:])
	dst = append(dst, cb[:]...)
	dst = append(dst, hdr...)
	if h.d.Header {
		var dg [4]byte
		wire.PutDigest(dg[:], wire.HeaderDigest(dst[start:]))
		dst = append(dst, dg[:]...)
	}
	if len(data) > 0 {
		dst = append(dst, data...)
		if h.d.Data {
			var dg [4]byte
			wire.PutDigest(dg[:], wire.DataDigest(0, data))
			dst = append(dst, dg[:]...)
		}
	}
	return dst
}

func (h *host) send(b []byte) {
	h.t.Helper()
	if _, err := h.c.Write(b); err != nil {
		h.t.Fatal(err)
	}
}

// capsule sends a command; inCap data travels in the capsule.
func (h *host) capsule(sqe *nvmeof.SQE, inCap []byte) {
	h.t.Helper()
	h.sbuf = h.appendPDU(h.sbuf[:0], wire.TypeCapsuleCmd, 0, sqe[:], inCap)
	h.send(h.sbuf)
}

// recv reads one PDU into h.pdu and returns its header and data (digests
// checked).
func (h *host) recv() (wire.Header, []byte, []byte) {
	h.t.Helper()
	if _, err := io.ReadFull(h.c, h.pdu[:wire.CommonHeaderSize]); err != nil {
		h.t.Fatalf("recv: %v", err)
	}
	hd, _ := wire.ParseHeader(h.pdu)
	if hd.PLen > uint32(len(h.pdu)) || hd.PLen < wire.CommonHeaderSize {
		h.t.Fatalf("PLEN %d", hd.PLen)
	}
	if _, err := io.ReadFull(h.c, h.pdu[wire.CommonHeaderSize:hd.PLen]); err != nil {
		h.t.Fatalf("recv: %v", err)
	}
	pdu := h.pdu[:hd.PLen]
	l, err := wire.Check(hd, false, h.d, 0)
	if err != nil {
		h.t.Fatalf("controller PDU: %v", err)
	}
	if l.HDGST {
		if err := wire.CheckHeaderDigest(pdu, hd); err != nil {
			h.t.Fatal(err)
		}
	}
	data := pdu[l.DataOff : l.DataOff+l.DataLen]
	if l.DDGST && wire.GetDigest(pdu[l.DataOff+l.DataLen:]) != wire.DataDigest(0, data) {
		h.t.Fatal("data digest")
	}
	return hd, pdu[:hd.HLen], data
}

// cqe reads PDUs until a CapsuleResp and returns its status; C2HData
// lands in into.
func (h *host) cqe(cid uint16, into []byte) nvmeof.Status {
	h.t.Helper()
	for {
		hd, hdr, data := h.recv()
		switch hd.Type {
		case wire.TypeCapsuleResp:
			c := wire.CapsuleCQE(hdr)
			if c.CID() != cid {
				h.t.Fatalf("CQE for CID %d, want %d", c.CID(), cid)
			}
			return c.Status()
		case wire.TypeC2HData:
			dh := (*wire.DataHeader)(hdr[:wire.DataHLen])
			copy(into[dh.Offset():], data)
		default:
			h.t.Fatalf("unexpected %s", hd.Type)
		}
	}
}

func (h *host) nextCID() uint16 { h.cid++; return h.cid }

// connect sends a Fabrics Connect for qid with its data in the capsule.
func (h *host) connect(qid uint16) {
	h.t.Helper()
	var sqe nvmeof.SQE
	sqe[0] = nvmeof.OpFabrics
	sqe[4] = nvmeof.FCTypeConnect
	cid := h.nextCID()
	binary.LittleEndian.PutUint16(sqe[2:], cid)
	binary.LittleEndian.PutUint16(sqe[42:], qid)
	binary.LittleEndian.PutUint16(sqe[44:], 31)
	sqe.SGL1().SetIdentifier(nvmeof.SGLIDInCapsule)
	sqe.SGL1().SetInCapsule(0, nvmeof.ConnectDataSize)
	sqe[1] = 0x40 // PSDT 01b
	h.capsule(&sqe, make([]byte, nvmeof.ConnectDataSize))
	if st := h.cqe(cid, nil); st != nvmeof.StatusSuccess {
		h.t.Fatalf("connect: %v", st)
	}
}

// rw builds an NVM Read or Write of n bytes at slba; inCap: in-capsule
// data, else a transport SGL data block.
func rwSQE(op uint8, cid uint16, slba uint64, n int, inCap bool) *nvmeof.SQE {
	var sqe nvmeof.SQE
	sqe[0] = op
	sqe[1] = 0x40
	binary.LittleEndian.PutUint16(sqe[2:], cid)
	binary.LittleEndian.PutUint32(sqe[4:], 1)
	binary.LittleEndian.PutUint64(sqe[40:], slba)
	binary.LittleEndian.PutUint16(sqe[48:], uint16(n/512-1))
	if inCap {
		sqe.SGL1().SetIdentifier(nvmeof.SGLIDInCapsule)
		sqe.SGL1().SetInCapsule(0, uint32(n))
	} else {
		sqe.SGL1().SetIdentifier(uint8(nvmeof.SGLTypeTransportDataBlock)<<4 | 0xA)
		sqe.SGL1().SetLength(uint32(n))
	}
	return &sqe
}

// writeR2T writes data through an R2T, in H2CData PDUs of chunk bytes.
func (h *host) writeR2T(slba uint64, data []byte, chunk int) nvmeof.Status {
	h.t.Helper()
	cid := h.nextCID()
	h.capsule(rwSQE(nvmeof.NVMWrite, cid, slba, len(data), false), nil)
	hd, hdr, _ := h.recv()
	if hd.Type != wire.TypeR2T {
		h.t.Fatalf("%s, want R2T", hd.Type)
	}
	r2t := *(*wire.DataHeader)(hdr[:wire.DataHLen])
	if r2t.CID() != cid || r2t.Offset() != 0 || int(r2t.Length()) != len(data) {
		h.t.Fatalf("R2T CID %d offset %d length %d", r2t.CID(), r2t.Offset(), r2t.Length())
	}
	for off := 0; off < len(data); off += chunk {
		n := min(chunk, len(data)-off)
		var flags uint8
		if off+n == len(data) {
			flags = wire.FlagLastPDU
		}
		h.sendH2C(flags, cid, r2t.TTag(), uint32(off), data[off:off+n])
	}
	return h.cqe(cid, nil)
}

func (h *host) sendH2C(flags uint8, cid, ttag uint16, off uint32, data []byte) {
	var dh [wire.DataHLen]byte
	wire.PutDataHeader(dh[:], wire.Header{}, cid, ttag, off, uint32(len(data)))
	h.sbuf = h.appendPDU(h.sbuf[:0], wire.TypeH2CData, flags, dh[wire.CommonHeaderSize:], data)
	h.send(h.sbuf)
}

func (h *host) read(slba uint64, into []byte) nvmeof.Status {
	cid := h.nextCID()
	h.capsule(rwSQE(nvmeof.NVMRead, cid, slba, len(into), false), nil)
	return h.cqe(cid, into)
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
			h.connect(1)
			small := pattern(4096, 1)
			cid := h.nextCID()
			h.capsule(rwSQE(nvmeof.NVMWrite, cid, 0, len(small), true), small)
			if st := h.cqe(cid, nil); st != nvmeof.StatusSuccess {
				t.Fatalf("in-capsule write: %v", st)
			}
			big := pattern(200<<10, 2)
			if st := h.writeR2T(8, big, 32<<10); st != nvmeof.StatusSuccess {
				t.Fatalf("R2T write: %v", st)
			}
			got := make([]byte, 4096+len(big))
			if st := h.read(0, got); st != nvmeof.StatusSuccess {
				t.Fatalf("read: %v", st)
			}
			if !bytes.Equal(got[:4096], small) || !bytes.Equal(got[4096:], big) {
				t.Fatal("read back differs from what was written")
			}
		})
	}
}

// termReq reads until a C2HTermReq and the close, and returns its FES
// and FEI.
func (h *host) termReq() (wire.FES, uint32) {
	h.t.Helper()
	for {
		var b [wire.CommonHeaderSize]byte
		if _, err := io.ReadFull(h.c, b[:]); err != nil {
			h.t.Fatalf("no C2HTermReq before the connection ended: %v", err)
		}
		hd, _ := wire.ParseHeader(b[:])
		rest := make([]byte, hd.PLen-wire.CommonHeaderSize)
		if _, err := io.ReadFull(h.c, rest); err != nil {
			h.t.Fatal(err)
		}
		if hd.Type != wire.TypeC2HTermReq {
			continue
		}
		p, err := wire.ParseTermReq(append(b[:], rest...), false)
		if err != nil {
			h.t.Fatal(err)
		}
		h.expectClose()
		return p.FES(), p.FEI()
	}
}

// expectClose waits (a generous minute) for the controller to close.
func (h *host) expectClose() {
	h.t.Helper()
	_ = h.c.SetReadDeadline(time.Now().Add(time.Minute))
	var b [4096]byte
	for {
		_, err := h.c.Read(b[:])
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return
		}
		if err != nil {
			h.t.Fatalf("the controller did not close the connection: %v", err)
		}
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

// TestHostile: PDUs that break the protocol end the queue with the
// C2HTermReq the specification names (TCP 1.0 §3.6.2.9), stalls with a
// close within their bounds.
func TestHostile(t *testing.T) {
	cfg := Config{ConnectTimeout: 300 * time.Millisecond, PDUTimeout: 300 * time.Millisecond, MaxH2CData: 8192}
	start := func(t *testing.T, d wire.Digests) (*host, *memHandler) {
		m := newMemHandler()
		ln := serve(t, cfg, m)
		h := dial(t, ln, d)
		h.connect(1)
		return h, m
	}
	t.Run("bad-HLEN", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		b := h.appendPDU(nil, wire.TypeCapsuleCmd, 0, make([]byte, nvmeof.SQESize), nil)
		b[2] = 40
		h.send(b)
		if fes, fei := h.termReq(); fes != wire.FESInvalidHeaderField || fei != 2 {
			t.Fatalf("FES %v FEI %d, want invalid header field at 2 (HLEN)", fes, fei)
		}
	})
	t.Run("PLEN-beyond-IOCCSZ", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		b := h.appendPDU(nil, wire.TypeCapsuleCmd, 0, rwSQE(nvmeof.NVMWrite, 9, 0, 4096, true)[:], nil)
		// PLEN says 1 MiB of in-capsule data follows; none does.
		binary.LittleEndian.PutUint32(b[4:], 1<<20)
		b[3] = wire.CapsuleCmdHLen
		h.send(b)
		if fes, _ := h.termReq(); fes != wire.FESDataLimitExceeded {
			t.Fatalf("FES %v, want data transfer limit exceeded", fes)
		}
	})
	t.Run("PLEN-short-stall", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		b := h.appendPDU(nil, wire.TypeCapsuleCmd, 0, rwSQE(nvmeof.NVMWrite, 9, 0, 4096, true)[:], make([]byte, 4096))
		h.send(b[:len(b)-100]) // the rest never comes
		h.expectClose()
	})
	t.Run("H2CData-outside-R2T", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		h.capsule(rwSQE(nvmeof.NVMWrite, 7, 0, 8192, false), nil)
		hd, hdr, _ := h.recv()
		if hd.Type != wire.TypeR2T {
			t.Fatalf("%s, want R2T", hd.Type)
		}
		r2t := (*wire.DataHeader)(hdr[:wire.DataHLen])
		h.sendH2C(wire.FlagLastPDU, 7, r2t.TTag(), 4096, make([]byte, 8192))
		if fes, _ := h.termReq(); fes != wire.FESDataOutOfRange {
			t.Fatalf("FES %v, want data transfer out of range", fes)
		}
	})
	t.Run("H2CData-wrong-TTAG", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		h.sendH2C(wire.FlagLastPDU, 7, 3, 0, make([]byte, 512))
		if fes, fei := h.termReq(); fes != wire.FESInvalidHeaderField || fei != 10 {
			t.Fatalf("FES %v FEI %d, want invalid header field at 10 (TTAG)", fes, fei)
		}
	})
	t.Run("H2CData-beyond-MAXH2CDATA", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		h.capsule(rwSQE(nvmeof.NVMWrite, 7, 0, 16384, false), nil)
		_, hdr, _ := h.recv()
		r2t := (*wire.DataHeader)(hdr[:wire.DataHLen])
		h.sendH2C(wire.FlagLastPDU, 7, r2t.TTag(), 0, make([]byte, 16384))
		if fes, _ := h.termReq(); fes != wire.FESDataLimitExceeded {
			t.Fatalf("FES %v, want data transfer limit exceeded", fes)
		}
	})
	t.Run("header-digest", func(t *testing.T) {
		h, _ := start(t, wire.Digests{Header: true})
		b := h.appendPDU(nil, wire.TypeCapsuleCmd, 0, rwSQE(nvmeof.NVMRead, 5, 0, 512, false)[:], nil)
		b[wire.CapsuleCmdHLen] ^= 1
		h.send(b)
		if fes, _ := h.termReq(); fes != wire.FESHeaderDigestError {
			t.Fatalf("FES %v, want header digest error", fes)
		}
	})
	t.Run("data-digest-H2CData", func(t *testing.T) {
		h, _ := start(t, wire.Digests{Data: true})
		h.capsule(rwSQE(nvmeof.NVMWrite, 7, 0, 4096, false), nil)
		_, hdr, _ := h.recv()
		r2t := (*wire.DataHeader)(hdr[:wire.DataHLen])
		var dh [wire.DataHLen]byte
		wire.PutDataHeader(dh[:], wire.Header{}, 7, r2t.TTag(), 0, 4096)
		b := h.appendPDU(nil, wire.TypeH2CData, wire.FlagLastPDU, dh[wire.CommonHeaderSize:], make([]byte, 4096))
		b[len(b)-1] ^= 0xFF
		h.send(b)
		// The command fails with a transient transport error; the queue
		// goes on.
		if st := h.cqe(7, nil); st.Code() != nvmeof.StatusTransientTransportError {
			t.Fatalf("status %v, want transient transport error", st)
		}
		if st := h.read(0, make([]byte, 512)); st != nvmeof.StatusSuccess {
			t.Fatalf("read after the digest error: %v", st)
		}
	})
	t.Run("R2T-unanswered", func(t *testing.T) {
		h, _ := start(t, wire.Digests{})
		h.capsule(rwSQE(nvmeof.NVMWrite, 7, 0, 8192, false), nil)
		if hd, _, _ := h.recv(); hd.Type != wire.TypeR2T {
			t.Fatalf("%s, want R2T", hd.Type)
		}
		h.expectClose() // no H2CData ever comes
	})
	t.Run("stalled-ICReq", func(t *testing.T) {
		ln := serve(t, cfg, newMemHandler())
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write(wire.NewICReq(0, wire.Digests{}, 0)[:50])
		h := &host{t: t, c: c}
		h.expectClose()
	})
	t.Run("no-Connect-after-ICResp", func(t *testing.T) {
		ln := serve(t, cfg, newMemHandler())
		h := dial(t, ln, wire.Digests{})
		h.expectClose()
	})
	t.Run("CapsuleCmd-before-ICReq", func(t *testing.T) {
		ln := serve(t, cfg, newMemHandler())
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		h := &host{t: t, c: c}
		h.send(h.appendPDU(nil, wire.TypeCapsuleCmd, 0, make([]byte, nvmeof.SQESize), nil))
		if fes, _ := h.termReq(); fes != wire.FESSequenceError {
			t.Fatalf("FES %v, want PDU sequence error", fes)
		}
	})
	t.Run("H2CTermReq", func(t *testing.T) {
		h, m := start(t, wire.Digests{})
		h.send(wire.AppendTermReq(nil, wire.TypeH2CTermReq, wire.FESInvalidHeaderField, 0, nil))
		h.expectClose()
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
		h.connect(1)
		buf := make([]byte, 64<<10)
		small := make([]byte, 4096)
		rd := rwSQE(nvmeof.NVMRead, 100, 0, len(buf), false)
		wr := rwSQE(nvmeof.NVMWrite, 101, 0, len(small), true)
		once := func() {
			h.capsule(rd, nil)
			if st := h.cqe(100, buf); st != nvmeof.StatusSuccess {
				t.Fatal(st)
			}
			h.capsule(wr, small)
			if st := h.cqe(101, nil); st != nvmeof.StatusSuccess {
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
	h := &host{t: t, c: c}
	h.expectClose()
}

// TestAdmittedOutlivesConnectTimeout: once the controller admitted the
// queue, the connect timeout no longer runs: an idle host (the keep-alive's
// business) keeps its queue past it.
func TestAdmittedOutlivesConnectTimeout(t *testing.T) {
	m := newMemHandler()
	ln := serve(t, Config{ConnectTimeout: 100 * time.Millisecond, PDUTimeout: 100 * time.Millisecond}, m)
	h := dial(t, ln, wire.Digests{})
	h.connect(1)
	time.Sleep(time.Second) // ten connect timeouts, idle between PDUs
	if st := h.read(0, make([]byte, 4096)); st != nvmeof.StatusSuccess {
		t.Fatalf("read after the connect timeout: %v", st)
	}
	select {
	case err := <-m.closed:
		t.Fatalf("the queue ended: %v", err)
	default:
	}
}

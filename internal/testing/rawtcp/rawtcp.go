// Package rawtcp is a hand-driven NVMe/TCP host for the tests of the
// NVMe/TCP binding (nvmeof/tcp) and of the target's TCP ports: one queue
// over a real TCP socket, built from the pure codecs of nvmeof/tcp/wire and
// nvmeof, with the PDUs under the test's control (any type, flags, header
// fields and data; digests as negotiated), and a correct host's steps where
// a test needs them: ICReq/ICResp (NVMe/TCP 1.0 §3.6.2.2, §3.6.2.3), Fabrics
// Connect in the capsule, Property Set of CC.EN and the wait for CSTS.RDY,
// commands with in-capsule data or through R2T/H2CData (§3.6.2.7–§3.6.2.8),
// C2HData placed into the caller's buffer, C2HTermReq (§3.6.2.9).
//
// Nothing runs in the background: bytes move only when the test calls a
// method. Every failure ends the test (t.Fatal). A PDU read or written on
// the steady path (Capsule, CQE, Run) allocates nothing, so tests may count
// the allocations of an I/O with this host on the other side.
package rawtcp

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// Hang bounds every read and write of a dialed host and the wait of
// ExpectClose: a guard against a hung test, not a protocol bound.
const Hang = time.Minute

// HostNQN is the host NQN of Connect.
const HostNQN = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa"

// Host is one raw NVMe/TCP queue, host side.
type Host struct {
	T testing.TB
	// Conn is the socket; tests may write to it or close it themselves.
	Conn net.Conn
	// Digests are the digests the host asked for (and Dial checked were
	// granted).
	Digests wire.Digests

	// ConnectSQE, if set, edits the Connect command before Connect sends
	// it (its attributes: SQ flow control disable, say).
	ConnectSQE func(sqe *nvmeof.SQE)
	// SQHD and Success are the last completion's, as Do and CQE saw it:
	// the SQ head pointer of its CapsuleResp, or Success when a C2HData
	// with the SUCCESS flag stood for it (NVMe/TCP 1.0 §3.6.2.7; no
	// CapsuleResp follows).
	SQHD    uint16
	Success bool

	cid  uint16
	qid  uint16
	size int
	pdu  []byte // what Recv reads into
	sbuf []byte // what Capsule and SendH2C build in
}

// New wraps c, on which no ICReq was sent yet (or which a test drives by
// hand), without a word on the wire.
func New(t testing.TB, c net.Conn, d wire.Digests) *Host {
	return &Host{T: t, Conn: c, Digests: d, pdu: make([]byte, 4<<20), sbuf: make([]byte, 0, 2<<20)}
}

// Dial connects to addr, sends ICReq with digests d and checks the ICResp:
// the digests granted are those asked, CPDA 0, PFV 1.0. The socket is
// closed when the test ends; its reads and writes are bounded by Hang.
func Dial(t testing.TB, addr string, d wire.Digests) *Host {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(Hang))
	h := New(t, c, d)
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
	if resp.Digests() != d || resp.CPDA() != 0 || resp.PFV() != wire.PFV10 {
		t.Fatalf("ICResp digests %+v (asked %+v) CPDA %d PFV %d", resp.Digests(), d, resp.CPDA(), resp.PFV())
	}
	return h
}

// AppendPDU appends a PDU of type typ with the header fields hdr (those
// after the common header) and data, with the digests of h.Digests.
func (h *Host) AppendPDU(dst []byte, typ wire.PDUType, flags uint8, hdr []byte, data []byte) []byte {
	ch := wire.NewHeader(typ, flags, h.Digests, uint32(len(data)), 0)
	start := len(dst)
	var cb [wire.CommonHeaderSize]byte
	ch.Put(cb[:])
	dst = append(dst, cb[:]...)
	dst = append(dst, hdr...)
	if h.Digests.Header {
		var dg [wire.DigestSize]byte
		wire.PutDigest(dg[:], wire.HeaderDigest(dst[start:]))
		dst = append(dst, dg[:]...)
	}
	if len(data) > 0 {
		dst = append(dst, data...)
		if h.Digests.Data {
			var dg [wire.DigestSize]byte
			wire.PutDigest(dg[:], wire.DataDigest(0, data))
			dst = append(dst, dg[:]...)
		}
	}
	return dst
}

// PDU is AppendPDU into a new buffer.
func (h *Host) PDU(typ wire.PDUType, flags uint8, hdr, data []byte) []byte {
	return h.AppendPDU(make([]byte, 0, 128+len(data)), typ, flags, hdr, data)
}

// Send writes b.
func (h *Host) Send(b []byte) {
	h.T.Helper()
	if _, err := h.Conn.Write(b); err != nil {
		h.T.Fatal(err)
	}
}

// Capsule sends a CapsuleCmd of sqe; inCap travels in the capsule.
func (h *Host) Capsule(sqe *nvmeof.SQE, inCap []byte) {
	h.T.Helper()
	h.sbuf = h.AppendPDU(h.sbuf[:0], wire.TypeCapsuleCmd, 0, sqe[:], inCap)
	h.Send(h.sbuf)
}

// Recv reads one PDU and returns its common header, its header (common
// header included) and its data, digests checked. The slices are valid
// until the next Recv.
func (h *Host) Recv() (wire.Header, []byte, []byte) {
	h.T.Helper()
	if _, err := io.ReadFull(h.Conn, h.pdu[:wire.CommonHeaderSize]); err != nil {
		h.T.Fatalf("recv: %v", err)
	}
	hd, _ := wire.ParseHeader(h.pdu)
	if hd.PLen > uint32(len(h.pdu)) || hd.PLen < wire.CommonHeaderSize {
		h.T.Fatalf("PLEN %d", hd.PLen)
	}
	if _, err := io.ReadFull(h.Conn, h.pdu[wire.CommonHeaderSize:hd.PLen]); err != nil {
		h.T.Fatalf("recv: %v", err)
	}
	pdu := h.pdu[:hd.PLen]
	l, err := wire.Check(hd, false, h.Digests, 0)
	if err != nil {
		h.T.Fatalf("controller PDU: %v", err)
	}
	if l.HDGST {
		if err := wire.CheckHeaderDigest(pdu, hd); err != nil {
			h.T.Fatal(err)
		}
	}
	data := pdu[l.DataOff : l.DataOff+l.DataLen]
	if l.DDGST && wire.GetDigest(pdu[l.DataOff+l.DataLen:]) != wire.DataDigest(0, data) {
		h.T.Fatal("data digest")
	}
	return hd, pdu[:hd.HLen], data
}

// CQE reads PDUs until the CapsuleResp of cid and returns its status;
// C2HData lands in into at its offset.
func (h *Host) CQE(cid uint16, into []byte) nvmeof.Status {
	h.T.Helper()
	for {
		hd, hdr, data := h.Recv()
		switch hd.Type {
		case wire.TypeCapsuleResp:
			c := wire.CapsuleCQE(hdr)
			if c.CID() != cid {
				h.T.Fatalf("CQE for CID %d, want %d", c.CID(), cid)
			}
			h.SQHD, h.Success = c.SQHead(), false
			return c.Status()
		case wire.TypeC2HData:
			dh := (*wire.DataHeader)(hdr[:wire.DataHLen])
			copy(into[dh.Offset():], data)
			if hd.Flags&wire.FlagSuccess != 0 {
				h.Success = true
				return nvmeof.StatusSuccess
			}
		default:
			h.T.Fatalf("unexpected %s", hd.Type)
		}
	}
}

// NextCID returns a fresh command identifier.
func (h *Host) NextCID() uint16 { h.cid++; return h.cid }

// Do runs a command to its response: out is host-to-controller data (in
// the capsule if inCap, else through R2T and H2CData PDUs of 32 KiB), in
// receives controller-to-host data. It sets the CID, PSDT and SGL1 of sqe
// and returns the status and completion dwords 0–1.
func (h *Host) Do(sqe *nvmeof.SQE, out []byte, inCap bool, in []byte) (nvmeof.Status, uint64) {
	h.T.Helper()
	cid := h.NextCID()
	sqe.SetCID(cid)
	sqe.SetPSDT(1)
	n := max(len(out), len(in))
	switch {
	case n == 0:
		sqe.SGL1().SetNull()
	case inCap:
		sqe.SGL1().SetIdentifier(nvmeof.SGLIDInCapsule)
		sqe.SGL1().SetInCapsule(0, uint32(n))
	default:
		sqe.SGL1().SetIdentifier(uint8(nvmeof.SGLTypeTransportDataBlock)<<4 | 0xA)
		sqe.SGL1().SetAddress(0)
		sqe.SGL1().SetLength(uint32(n))
	}
	var capData []byte
	if inCap {
		capData = out
	}
	h.Send(h.PDU(wire.TypeCapsuleCmd, 0, sqe[:], capData))
	for {
		hd, hdr, data := h.Recv()
		switch hd.Type {
		case wire.TypeR2T:
			r2t := *(*wire.DataHeader)(hdr[:wire.DataHLen])
			if r2t.CID() != cid || int(r2t.Offset())+int(r2t.Length()) > len(out) {
				h.T.Fatalf("R2T CID %d %d+%d for %d bytes", r2t.CID(), r2t.Offset(), r2t.Length(), len(out))
			}
			const chunk = 32 << 10
			end := r2t.Offset() + r2t.Length()
			for off := r2t.Offset(); off < end; off += chunk {
				m := min(chunk, end-off)
				var flags uint8
				if off+m == end {
					flags = wire.FlagLastPDU
				}
				var dh [wire.DataHLen]byte
				wire.PutDataHeader(dh[:], wire.Header{}, cid, r2t.TTag(), off, m)
				h.Send(h.PDU(wire.TypeH2CData, flags, dh[wire.CommonHeaderSize:], out[off:off+m]))
			}
		case wire.TypeC2HData:
			dh := (*wire.DataHeader)(hdr[:wire.DataHLen])
			if dh.CID() != cid {
				h.T.Fatalf("C2HData for CID %d, want %d", dh.CID(), cid)
			}
			copy(in[dh.Offset():], data)
			if hd.Flags&wire.FlagSuccess != 0 {
				h.Success = true
				return nvmeof.StatusSuccess, 0
			}
		case wire.TypeCapsuleResp:
			cqe := wire.CapsuleCQE(hdr)
			if cqe.CID() != cid {
				h.T.Fatalf("CQE for CID %d, want %d", cqe.CID(), cid)
			}
			h.SQHD, h.Success = cqe.SQHead(), false
			return cqe.Status(), cqe.Result64()
		default:
			h.T.Fatalf("unexpected %s", hd.Type)
		}
	}
}

// Connect sends a Fabrics Connect for queue qid of size entries with the
// Keep Alive Timeout kato (ms), for subnqn and controller cntlid, its data
// in the capsule, and returns the controller ID of the response.
func (h *Host) Connect(qid uint16, size int, subnqn string, cntlid uint16, kato uint32) uint16 {
	h.T.Helper()
	var d nvmeof.ConnectData
	d.SetHostID([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	d.SetCNTLID(cntlid)
	d.SetSubNQN(subnqn)
	d.SetHostNQN(HostNQN)
	var sqe nvmeof.SQE
	sqe.BuildConnect(qid, uint16(size-1), kato)
	if h.ConnectSQE != nil {
		h.ConnectSQE(&sqe)
	}
	st, res := h.Do(&sqe, d[:], true, nil)
	if st != nvmeof.StatusSuccess {
		h.T.Fatalf("connect qid %d: %v", qid, st)
	}
	h.qid, h.size = qid, size
	return uint16(res)
}

// Enable sets CC.EN (with the I/O queue entry sizes) by Property Set and
// polls CSTS until RDY, for at most Hang.
func (h *Host) Enable() {
	h.T.Helper()
	var cc nvmeof.CC
	cc.SetIOSQES(6)
	cc.SetIOCQES(4)
	cc.SetEN(true)
	var sqe nvmeof.SQE
	sqe.BuildPropertySet(nvmeof.PropCC, uint64(cc))
	if st, _ := h.Do(&sqe, nil, false, nil); st != nvmeof.StatusSuccess {
		h.T.Fatalf("set CC: %v", st)
	}
	deadline := time.Now().Add(Hang)
	for {
		sqe = nvmeof.SQE{}
		sqe.BuildPropertyGet(nvmeof.PropCSTS)
		st, v := h.Do(&sqe, nil, false, nil)
		if st != nvmeof.StatusSuccess {
			h.T.Fatalf("get CSTS: %v", st)
		}
		if nvmeof.CSTS(v).RDY() {
			return
		}
		if time.Now().After(deadline) {
			h.T.Fatal("CSTS.RDY never set")
		}
		time.Sleep(time.Millisecond)
	}
}

// RWSQE builds an NVM Read or Write (op) of n bytes at slba on namespace
// 1 with CID cid; inCap: in-capsule data, else a transport SGL data block.
func RWSQE(op uint8, cid uint16, slba uint64, n int, inCap bool) *nvmeof.SQE {
	var sqe nvmeof.SQE
	sqe[0] = op
	sqe[1] = 0x40 // PSDT 01b: SGLs, metadata buffer contiguous
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

// SendH2C sends one H2CData PDU for the command cid under the transfer tag
// ttag, at offset off.
func (h *Host) SendH2C(flags uint8, cid, ttag uint16, off uint32, data []byte) {
	h.T.Helper()
	var dh [wire.DataHLen]byte
	wire.PutDataHeader(dh[:], wire.Header{}, cid, ttag, off, uint32(len(data)))
	h.sbuf = h.AppendPDU(h.sbuf[:0], wire.TypeH2CData, flags, dh[wire.CommonHeaderSize:], data)
	h.Send(h.sbuf)
}

// WriteR2T writes data at slba through one R2T, in H2CData PDUs of chunk
// bytes, and returns the status.
func (h *Host) WriteR2T(slba uint64, data []byte, chunk int) nvmeof.Status {
	h.T.Helper()
	cid := h.NextCID()
	h.Capsule(RWSQE(nvmeof.NVMWrite, cid, slba, len(data), false), nil)
	hd, hdr, _ := h.Recv()
	if hd.Type != wire.TypeR2T {
		h.T.Fatalf("%s, want R2T", hd.Type)
	}
	r2t := *(*wire.DataHeader)(hdr[:wire.DataHLen])
	if r2t.CID() != cid || r2t.Offset() != 0 || int(r2t.Length()) != len(data) {
		h.T.Fatalf("R2T CID %d offset %d length %d", r2t.CID(), r2t.Offset(), r2t.Length())
	}
	for off := 0; off < len(data); off += chunk {
		n := min(chunk, len(data)-off)
		var flags uint8
		if off+n == len(data) {
			flags = wire.FlagLastPDU
		}
		h.SendH2C(flags, cid, r2t.TTag(), uint32(off), data[off:off+n])
	}
	return h.CQE(cid, nil)
}

// Read reads len(into) bytes at slba through C2HData.
func (h *Host) Read(slba uint64, into []byte) nvmeof.Status {
	h.T.Helper()
	cid := h.NextCID()
	h.Capsule(RWSQE(nvmeof.NVMRead, cid, slba, len(into), false), nil)
	return h.CQE(cid, into)
}

// Prepare builds the CapsuleCmd PDU of a command of n bytes once (CID
// 1000), for Run.
func (h *Host) Prepare(sqe *nvmeof.SQE, n int, inCap bool) []byte {
	sqe.SetCID(1000)
	sqe.SetPSDT(1)
	if inCap {
		sqe.SGL1().SetIdentifier(nvmeof.SGLIDInCapsule)
		sqe.SGL1().SetInCapsule(0, uint32(n))
		return h.PDU(wire.TypeCapsuleCmd, 0, sqe[:], make([]byte, n))
	}
	sqe.SGL1().SetIdentifier(uint8(nvmeof.SGLTypeTransportDataBlock)<<4 | 0xA)
	sqe.SGL1().SetLength(uint32(n))
	return h.PDU(wire.TypeCapsuleCmd, 0, sqe[:], nil)
}

// Run sends a prepared command and answers its R2T with the prepared
// H2CData PDU h2c (its header fields patched in place), until a successful
// response; C2HData lands in data. It allocates nothing.
func (h *Host) Run(cmd, h2c, data []byte) {
	if _, err := h.Conn.Write(cmd); err != nil {
		h.T.Fatal(err)
	}
	for {
		hd, hdr, in := h.Recv()
		switch hd.Type {
		case wire.TypeR2T:
			r2t := (*wire.DataHeader)(hdr[:wire.DataHLen])
			hh, _ := wire.ParseHeader(h2c)
			wire.PutDataHeader(h2c, hh, r2t.CID(), r2t.TTag(), 0, uint32(len(data)))
			if h.Digests.Header {
				wire.PutDigest(h2c[wire.DataHLen:], wire.HeaderDigest(h2c[:wire.DataHLen]))
			}
			if _, err := h.Conn.Write(h2c); err != nil {
				h.T.Fatal(err)
			}
		case wire.TypeC2HData:
			copy(data, in)
		case wire.TypeCapsuleResp:
			if st := wire.CapsuleCQE(hdr).Status(); st != nvmeof.StatusSuccess {
				h.T.Fatalf("status %v", st)
			}
			return
		}
	}
}

// TermReq reads until a C2HTermReq and the close that follows, and returns
// its FES and FEI.
func (h *Host) TermReq() (wire.FES, uint32) {
	h.T.Helper()
	for {
		var b [wire.CommonHeaderSize]byte
		if _, err := io.ReadFull(h.Conn, b[:]); err != nil {
			h.T.Fatalf("no C2HTermReq before the connection ended: %v", err)
		}
		hd, _ := wire.ParseHeader(b[:])
		rest := make([]byte, hd.PLen-wire.CommonHeaderSize)
		if _, err := io.ReadFull(h.Conn, rest); err != nil {
			h.T.Fatal(err)
		}
		if hd.Type != wire.TypeC2HTermReq {
			continue
		}
		p, err := wire.ParseTermReq(append(b[:], rest...), false)
		if err != nil {
			h.T.Fatal(err)
		}
		h.ExpectClose()
		return p.FES(), p.FEI()
	}
}

// ExpectClose reads (for at most Hang) until the controller closes the
// connection.
func (h *Host) ExpectClose() {
	h.T.Helper()
	_ = h.Conn.SetReadDeadline(time.Now().Add(Hang))
	var b [4096]byte
	for {
		_, err := h.Conn.Read(b[:])
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || IsReset(err) {
			return
		}
		if err != nil {
			h.T.Fatalf("the controller did not close the connection: %v", err)
		}
	}
}

// IsReset: a connection error other than a timeout (ECONNRESET and its
// kin), which ends the connection as a close does.
func IsReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

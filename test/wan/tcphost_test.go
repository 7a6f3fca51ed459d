package wan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// tcpHost is a small NVMe/TCP host written on the wire package (the Go
// host of nvmeof -t tcp is not in this tree yet): one admin queue and n
// I/O queues, each its own TCP connection with one command in flight (a
// mutex), no digests. It is a verify.Device: the workload's workers share
// the queues, so commands of several queues interleave in the relay.
type tcpHost struct {
	admin *tcpQueue
	io    []*tcpQueue
	next  atomic.Uint32
	size  int64
	lba   int
}

type tcpQueue struct {
	mu  sync.Mutex
	c   net.Conn
	cid uint16
	buf []byte
}

const tcpHostNQN = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000077a1"

func dialTCPQueue(ctx context.Context, addr string) (*tcpQueue, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(hang))
	if _, err := c.Write(wire.NewICReq(0, wire.Digests{}, 0)[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("ICReq: %w", err)
	}
	var b [wire.ICSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("ICResp: %w", err)
	}
	if _, err := wire.ParseICResp(b[:], wire.Digests{}); err != nil {
		c.Close()
		return nil, fmt.Errorf("ICResp: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	return &tcpQueue{c: c, buf: make([]byte, 1<<20+256)}, nil
}

func (q *tcpQueue) pdu(typ wire.PDUType, flags uint8, hdr, data []byte) []byte {
	ch := wire.NewHeader(typ, flags, wire.Digests{}, uint32(len(data)), 0)
	b := make([]byte, wire.CommonHeaderSize, 128+len(data))
	ch.Put(b)
	b = append(b, hdr...)
	return append(b, data...)
}

func (q *tcpQueue) recv() (wire.Header, []byte, []byte, error) {
	if _, err := io.ReadFull(q.c, q.buf[:wire.CommonHeaderSize]); err != nil {
		return wire.Header{}, nil, nil, err
	}
	hd, _ := wire.ParseHeader(q.buf)
	if hd.PLen > uint32(len(q.buf)) || hd.PLen < wire.CommonHeaderSize {
		return hd, nil, nil, fmt.Errorf("PDU length %d", hd.PLen)
	}
	if _, err := io.ReadFull(q.c, q.buf[wire.CommonHeaderSize:hd.PLen]); err != nil {
		return hd, nil, nil, err
	}
	l, err := wire.Check(hd, false, wire.Digests{}, 0)
	if err != nil {
		return hd, nil, nil, fmt.Errorf("controller PDU: %w", err)
	}
	pdu := q.buf[:hd.PLen]
	return hd, pdu[:hd.HLen], pdu[l.DataOff : l.DataOff+l.DataLen], nil
}

// do runs one command: out goes in the capsule if inCap, else through
// R2T/H2CData; in receives C2HData. Bounded by hang.
func (q *tcpQueue) do(sqe *nvmeof.SQE, out []byte, inCap bool, in []byte) (nvmeof.Status, uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	_ = q.c.SetDeadline(time.Now().Add(hang))
	q.cid++
	cid := q.cid
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
	if _, err := q.c.Write(q.pdu(wire.TypeCapsuleCmd, 0, sqe[:], capData)); err != nil {
		return 0, 0, err
	}
	for {
		hd, hdr, data, err := q.recv()
		if err != nil {
			return 0, 0, err
		}
		switch hd.Type {
		case wire.TypeR2T:
			r2t := *(*wire.DataHeader)(hdr[:wire.DataHLen])
			if r2t.CID() != cid || int(r2t.Offset())+int(r2t.Length()) > len(out) {
				return 0, 0, fmt.Errorf("R2T CID %d %d+%d for %d bytes", r2t.CID(), r2t.Offset(), r2t.Length(), len(out))
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
				if _, err := q.c.Write(q.pdu(wire.TypeH2CData, flags, dh[wire.CommonHeaderSize:], out[off:off+m])); err != nil {
					return 0, 0, err
				}
			}
		case wire.TypeC2HData:
			dh := (*wire.DataHeader)(hdr[:wire.DataHLen])
			if dh.CID() != cid || int(dh.Offset())+len(data) > len(in) {
				return 0, 0, fmt.Errorf("C2HData CID %d at %d+%d, want CID %d within %d", dh.CID(), dh.Offset(), len(data), cid, len(in))
			}
			copy(in[dh.Offset():], data)
		case wire.TypeCapsuleResp:
			cqe := wire.CapsuleCQE(hdr)
			if cqe.CID() != cid {
				return 0, 0, fmt.Errorf("CQE for CID %d, want %d", cqe.CID(), cid)
			}
			return cqe.Status(), cqe.Result64(), nil
		default:
			return 0, 0, fmt.Errorf("unexpected %s", hd.Type)
		}
	}
}

func (q *tcpQueue) connect(qid uint16, size int, subnqn string, cntlid uint16) (uint16, error) {
	var d nvmeof.ConnectData
	d.SetHostID([16]byte{0x6e, 0x76, 0x6d, 0x65, 0x74, 0x64, 0x4c, 0x61, 0x9b, 0, 0, 0, 0, 0, 0x77, 0xa1})
	d.SetCNTLID(cntlid)
	d.SetSubNQN(subnqn)
	d.SetHostNQN(tcpHostNQN)
	var sqe nvmeof.SQE
	sqe.BuildConnect(qid, uint16(size-1), 0)
	st, res, err := q.do(&sqe, d[:], true, nil)
	if err != nil {
		return 0, err
	}
	if st != nvmeof.StatusSuccess {
		return 0, fmt.Errorf("connect qid %d: %v", qid, st)
	}
	return uint16(res), nil
}

// connectTCPHost opens an association with n I/O queues to addr.
func connectTCPHost(ctx context.Context, addr, subnqn string, n int) (h *tcpHost, err error) {
	h = &tcpHost{}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	if h.admin, err = dialTCPQueue(ctx, addr); err != nil {
		return h, err
	}
	cntlid, err := h.admin.connect(0, nvmeof.AdminQueueDepth, subnqn, nvmeof.CNTLIDDynamic)
	if err != nil {
		return h, err
	}
	var cc nvmeof.CC
	cc.SetIOSQES(6)
	cc.SetIOCQES(4)
	cc.SetEN(true)
	var sqe nvmeof.SQE
	sqe.BuildPropertySet(nvmeof.PropCC, uint64(cc))
	if st, _, err := h.admin.do(&sqe, nil, false, nil); err != nil || st != nvmeof.StatusSuccess {
		return h, fmt.Errorf("set CC: %v %v", st, err)
	}
	for deadline := time.Now().Add(hang); ; {
		sqe = nvmeof.SQE{}
		sqe.BuildPropertyGet(nvmeof.PropCSTS)
		st, v, err := h.admin.do(&sqe, nil, false, nil)
		if err != nil || st != nvmeof.StatusSuccess {
			return h, fmt.Errorf("get CSTS: %v %v", st, err)
		}
		if nvmeof.CSTS(v).RDY() {
			break
		}
		if time.Now().After(deadline) {
			return h, errors.New("CSTS.RDY never set")
		}
		time.Sleep(time.Millisecond)
	}
	id := make([]byte, nvmeof.IdentifyDataSize)
	sqe = nvmeof.SQE{}
	sqe.BuildIdentify(nvmeof.CNSNamespace, 1, 0, 0)
	if st, _, err := h.admin.do(&sqe, nil, false, id); err != nil || st != nvmeof.StatusSuccess {
		return h, fmt.Errorf("identify namespace 1: %v %v", st, err)
	}
	ns := (*nvmeof.IdentifyNamespace)(id)
	h.lba = ns.LBAF(ns.FormatIndex()).BlockSize()
	h.size = int64(ns.NSZE()) * int64(h.lba)
	for i := range n {
		q, err := dialTCPQueue(ctx, addr)
		if err != nil {
			return h, err
		}
		h.io = append(h.io, q)
		if _, err := q.connect(uint16(i+1), 32, subnqn, cntlid); err != nil {
			return h, err
		}
	}
	return h, nil
}

func (h *tcpHost) Close() {
	for _, q := range append([]*tcpQueue{h.admin}, h.io...) {
		if q != nil {
			_ = q.c.Close()
		}
	}
}

func (h *tcpHost) Size() int64 { return h.size }

func (h *tcpHost) rw(write bool, p []byte, off int64) (int, error) {
	if off%int64(h.lba) != 0 || len(p)%h.lba != 0 {
		return 0, fmt.Errorf("unaligned I/O %d+%d", off, len(p))
	}
	q := h.io[int(h.next.Add(1))%len(h.io)]
	var sqe nvmeof.SQE
	var st nvmeof.Status
	var err error
	if write {
		sqe.BuildWrite(1, uint64(off/int64(h.lba)), uint32(len(p)/h.lba))
		// In-capsule up to the target's default 4 KiB, R2T beyond: both
		// paths cross the relay.
		st, _, err = q.do(&sqe, p, len(p) <= 4096, nil)
	} else {
		sqe.BuildRead(1, uint64(off/int64(h.lba)), uint32(len(p)/h.lba))
		st, _, err = q.do(&sqe, nil, false, p)
	}
	if err != nil {
		return 0, err
	}
	if st != nvmeof.StatusSuccess {
		return 0, st
	}
	return len(p), nil
}

func (h *tcpHost) ReadAtContext(_ context.Context, p []byte, off int64) (int, error) {
	return h.rw(false, p, off)
}

func (h *tcpHost) WriteAtContext(_ context.Context, p []byte, off int64) (int, error) {
	return h.rw(true, p, off)
}

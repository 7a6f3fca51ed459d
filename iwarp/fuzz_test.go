package iwarp

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// FuzzRxStream feeds arbitrary bytes, after a valid MPA exchange, to a QP
// with registered memory and posted receives. Whatever arrives, the QP must
// end (Terminate or close) without panicking or hanging once the peer
// closes. The first byte picks CRC on or off.
func FuzzRxStream(f *testing.F) {
	p := &rawPeer{crc: false, msn: [3]uint32{1, 1, 1}}
	f.Add(append([]byte{0}, p.fpdu(untagged(wire.OpSend, true, 0, 0, 1, 0, []byte("hello")))...))
	f.Add(append([]byte{0}, p.fpdu(tagged(wire.OpWrite, true, 0x100, 0, make([]byte, 64)))...))
	body := make([]byte, wire.ReadRequestLen)
	(&wire.ReadRequest{SinkSTag: 1, Size: 16, SrcSTag: 0x100}).Encode(body)
	f.Add(append([]byte{0}, p.fpdu(untagged(wire.OpReadRequest, true, 0, 1, 1, 0, body))...))
	f.Add(append([]byte{0}, p.fpdu(untagged(wire.OpTerminate, true, 0, 2, 1, 0, []byte{0x12, 0x02, 0, 0}))...))
	p.crc = true
	f.Add(append([]byte{1}, p.fpdu(untagged(wire.OpSend, false, 0, 0, 1, 0, []byte("abcd")))...))

	var once sync.Once
	var ln *Listener
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		once.Do(func() {
			var err error
			ln, err = Listen("tcp", "127.0.0.1:0", &Config{StallTimeout: time.Second, LingerTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
		})
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		req := stdRequest()
		req.CRC = in[0]&1 == 1
		if _, err := c.Write(req.Append(nil)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		cr, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := newSide(t, QPAttr{IRD: 2})
		mr, _ := s.pd.RegisterMemory(make([]byte, 4096), AccessRemoteRead|AccessRemoteWrite|AccessLocalWrite)
		_ = mr
		for i := 0; i < 4; i++ {
			_ = s.qp.PostRecv(&RecvWR{ID: uint64(i), Buf: make([]byte, 128)})
		}
		if err := cr.Accept(s.qp, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := readMPAFrame(c, 512); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = c.Write(in[1:]); c.(*net.TCPConn).CloseWrite() }()
		go func() {
			b := make([]byte, 4096)
			for {
				if _, err := c.Read(b); err != nil {
					return
				}
			}
		}()
		select {
		case <-s.qp.Done():
		case <-time.After(hang):
			t.Fatalf("QP did not end; state %v", s.qp.State())
		}
	})
	if ln != nil {
		ln.Close()
	}
}

// FuzzEngine feeds arbitrary bytes, split at arbitrary points, to the pure
// protocol engine of a QP with registered memory, posted receives and posted
// sends, laying out and writing batches between the pieces; then the
// connection fails and the engine is flushed. Whatever arrives: no panic,
// and every posted work request completes exactly once. The first byte
// picks CRC and the initial posts; the second seeds the split points.
func FuzzEngine(f *testing.F) {
	p := &rawPeer{crc: false, msn: [3]uint32{1, 1, 1}}
	f.Add([]byte{0, 3}, p.fpdu(untagged(wire.OpSend, true, 0, 0, 1, 0, []byte("hello"))))
	f.Add([]byte{0, 5}, p.fpdu(tagged(wire.OpWrite, true, 0x100, 0, make([]byte, 64))))
	body := make([]byte, wire.ReadRequestLen)
	(&wire.ReadRequest{SinkSTag: 1, Size: 16, SrcSTag: 0x100}).Encode(body)
	f.Add([]byte{2, 7}, p.fpdu(untagged(wire.OpReadRequest, true, 0, 1, 1, 0, body)))
	f.Add([]byte{0, 1}, p.fpdu(untagged(wire.OpTerminate, true, 0, 2, 1, 0, []byte{0x12, 0x02, 0, 0})))
	f.Add([]byte{6, 2}, p.fpdu(tagged(wire.OpReadResponse, true, 0, 0, make([]byte, 16))))
	p.crc = true
	f.Add([]byte{1, 9}, p.fpdu(untagged(wire.OpSend, false, 0, 0, 1, 0, []byte("abcd"))))

	f.Fuzz(func(t *testing.T, ctl, in []byte) {
		if len(ctl) < 2 {
			return
		}
		qp, err := NewQP(QPAttr{PD: NewPD(), SendCQ: NewCQ(16), RecvCQ: NewCQ(16), SendDepth: 8, RecvDepth: 4, IRD: 2, ORD: 2})
		if err != nil {
			t.Fatal(err)
		}
		e := qp.e
		remote, _ := qp.pd.RegisterMemoryAt(make([]byte, 4096), 0, AccessRemoteRead|AccessRemoteWrite|AccessLocalWrite)
		sink, _ := qp.pd.RegisterMemoryAt(make([]byte, 4096), 0x100000, AccessLocalWrite)
		_ = remote
		e.start(negotiated{crc: ctl[0]&1 == 1, enhanced: true, ird: 2, ord: 2}, true, 256, engineLimits{stall: time.Second, write: time.Second}, 0)
		posted := map[uint64]int{}
		for i := 0; i < 4; i++ {
			id := uint64(100 + i)
			if e.postRecv(&RecvWR{ID: id, Buf: make([]byte, 128)}) == nil {
				posted[id]++
			}
		}
		if ctl[0]&2 != 0 {
			var ent [1]sqEntry
			wr := SendWR{ID: 1, Opcode: WRRead, Signaled: true, RemoteSTag: 0x100, SinkMR: sink, Length: 16}
			if qp.prepare(&wr, &ent[0]) == nil && e.postSend(ent[:]) == nil {
				posted[1]++
			}
		}
		if ctl[0]&4 != 0 {
			var ent [1]sqEntry
			wr := SendWR{ID: 2, Opcode: WRSend, Signaled: true, Local: [][]byte{make([]byte, 600)}}
			if qp.prepare(&wr, &ent[0]) == nil && e.postSend(ent[:]) == nil {
				posted[2]++
			}
		}
		got := map[uint64]int{}
		take := func() {
			for _, wc := range e.out {
				got[wc.ID]++
			}
			e.out = e.out[:0]
		}
		seed := int(ctl[1]) + 1
		for len(in) > 0 && e.state == QPStateRTS {
			n := min(len(in), seed%29+1)
			seed = (seed*31 + 7) & 0x7fffffff // non-negative: a long input overflowed it into a negative read size
			if _, _, err := e.rxConsume(in[:n]); err != nil {
				break
			}
			in = in[n:]
			take()
			if iov := e.txLayout(); iov != nil {
				total := 0
				for _, b := range iov {
					total += len(b)
				}
				e.txWritten(total - e.txOffset() - seed%3)
			}
			take()
		}
		e.fail(ErrPeerClosed)
		e.flush()
		take()
		for id, n := range got {
			if n != 1 || posted[id] != 1 {
				t.Fatalf("work request %d completed %d times (posted %d)", id, n, posted[id])
			}
		}
		for id := range posted {
			if got[id] != 1 {
				t.Fatalf("work request %d never completed", id)
			}
		}
	})
}

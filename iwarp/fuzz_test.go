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
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
		if _, _, err := readMPAFrame(c, 512); err != nil {
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
		case <-time.After(10 * time.Second):
			t.Fatalf("QP did not end; state %v", s.qp.State())
		}
	})
	if ln != nil {
		ln.Close()
	}
}

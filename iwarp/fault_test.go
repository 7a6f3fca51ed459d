package iwarp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// rawPeer is a hand-driven initiator that speaks MPA and then writes
// crafted FPDUs, to check how a QP answers bad input.
type rawPeer struct {
	t    testing.TB
	c    net.Conn
	crc  bool
	msn  [wire.NumQN]uint32
	rest []byte // bytes read past the reply
}

// acceptOne serves one connection on a listener with a QP made by mk and
// returns it once accepted.
func acceptOne(t testing.TB, cfg *Config, attr QPAttr, recvs int) (*Listener, chan *side) {
	t.Helper()
	ln, err := Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan *side, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		req, err := ln.Accept(ctx)
		if err != nil {
			close(ch)
			return
		}
		s := newSide(t, attr)
		for i := 0; i < recvs; i++ {
			_ = s.qp.PostRecv(&RecvWR{ID: uint64(i), Buf: make([]byte, 256)})
		}
		if err := req.Accept(s.qp, nil); err != nil {
			close(ch)
			return
		}
		ch <- s
	}()
	return ln, ch
}

func dialRaw(t testing.TB, addr string, req wire.MPAFrame) (*rawPeer, wire.MPAFrame, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, hang)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(hang))
	if _, err := c.Write(req.Append(nil)); err != nil {
		return nil, wire.MPAFrame{}, err
	}
	rep, err := readMPAFrame(c, wire.MPAMaxPrivateData)
	p := &rawPeer{t: t, c: c, crc: rep.CRC, msn: [3]uint32{1, 1, 1}}
	return p, rep, err
}

func stdRequest() wire.MPAFrame {
	return wire.MPAFrame{Revision: 2, Enhanced: true, IRD: 16, ORD: 16}
}

// fpdu frames a DDP segment (header bytes without the length field, then
// payload) with length, pad and CRC.
func (p *rawPeer) fpdu(ddp []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(ddp)))
	b = append(b, ddp...)
	b = append(b, make([]byte, wire.PadLen(len(ddp)))...)
	var crc [4]byte
	if p.crc {
		wire.PutCRC(crc[:], wire.CRC(b))
	}
	return append(b, crc[:]...)
}

func untagged(op wire.Opcode, last bool, inv, qn, msn, mo uint32, payload []byte) []byte {
	h := make([]byte, wire.UntaggedHeaderLen)
	wire.PutUntaggedHeader(h, op, last, inv, qn, msn, mo, len(payload))
	return append(h[2:], payload...)
}

func tagged(op wire.Opcode, last bool, stag uint32, to uint64, payload []byte) []byte {
	h := make([]byte, wire.TaggedHeaderLen)
	wire.PutTaggedHeader(h, op, last, stag, to, len(payload))
	return append(h[2:], payload...)
}

func (p *rawPeer) send(b []byte) {
	if _, err := p.c.Write(b); err != nil {
		p.t.Fatalf("raw peer write: %v", err)
	}
}

// readTerminate reads FPDUs until a Terminate arrives, then checks the
// connection closes.
func (p *rawPeer) readTerminate() (wire.Terminate, error) {
	all, _ := io.ReadAll(p.c)
	all = append(p.rest, all...)
	for len(all) >= 2 {
		n := wire.FPDULen(wire.ULPDULength(all))
		if n > len(all) {
			break
		}
		var h wire.Header
		hl, err := wire.DecodeHeader(all[:n], &h)
		if err != nil {
			return wire.Terminate{}, err
		}
		if h.Opcode == wire.OpTerminate {
			if h.QN != 2 || h.MSN != 1 || h.MO != 0 || !h.Last {
				return wire.Terminate{}, fmt.Errorf("terminate header %+v", h)
			}
			return wire.DecodeTerminate(all[hl : hl+h.PayloadLen()])
		}
		all = all[n:]
	}
	return wire.Terminate{}, errors.New("connection closed without a terminate")
}

func TestProtectionErrors(t *testing.T) {
	type env struct {
		srv             *side
		rw, ro, foreign *MR
	}
	sendMsg := func(p *rawPeer, payload []byte) []byte {
		b := p.fpdu(untagged(wire.OpSend, true, 0, 0, p.msn[0], 0, payload))
		p.msn[0]++
		return b
	}
	readReq := func(p *rawPeer, rr wire.ReadRequest) []byte {
		body := make([]byte, wire.ReadRequestLen)
		rr.Encode(body)
		b := p.fpdu(untagged(wire.OpReadRequest, true, 0, 1, p.msn[1], 0, body))
		p.msn[1]++
		return b
	}
	cases := []struct {
		name  string
		bytes func(p *rawPeer, e *env) []byte
		cause wire.Cause
	}{
		{"write to unknown STag", func(p *rawPeer, e *env) []byte {
			return p.fpdu(tagged(wire.OpWrite, true, e.rw.STag()^0x100, e.rw.IOVA(), []byte("abcd")))
		}, wire.CauseDDPTaggedInvalidSTag},
		{"write with wrong key", func(p *rawPeer, e *env) []byte {
			return p.fpdu(tagged(wire.OpWrite, true, e.rw.STag()^1, e.rw.IOVA(), []byte("abcd")))
		}, wire.CauseDDPTaggedInvalidSTag},
		{"write past the end", func(p *rawPeer, e *env) []byte {
			return p.fpdu(tagged(wire.OpWrite, true, e.rw.STag(), e.rw.IOVA()+4094, []byte("abcd")))
		}, wire.CauseDDPTaggedBaseBounds},
		{"write below the base", func(p *rawPeer, e *env) []byte {
			return p.fpdu(tagged(wire.OpWrite, true, e.rw.STag(), e.rw.IOVA()-1, []byte("abcd")))
		}, wire.CauseDDPTaggedBaseBounds},
		{"write with TO wrap", func(p *rawPeer, e *env) []byte {
			return p.fpdu(tagged(wire.OpWrite, true, e.rw.STag(), ^uint64(0)-1, []byte("abcd")))
		}, wire.CauseDDPTaggedBaseBounds},
		{"write to read-only region", func(p *rawPeer, e *env) []byte {
			return p.fpdu(tagged(wire.OpWrite, true, e.ro.STag(), e.ro.IOVA(), []byte("abcd")))
		}, wire.CauseDDPTaggedInvalidSTag}, // RFC 5041 has no access code; siw reports invalid STag
		{"write to another PD", func(p *rawPeer, e *env) []byte {
			return p.fpdu(tagged(wire.OpWrite, true, e.foreign.STag(), e.foreign.IOVA(), []byte("abcd")))
		}, wire.CauseDDPTaggedInvalidSTag},
		{"write to invalidated region", func(p *rawPeer, e *env) []byte {
			e.rw.Invalidate()
			return p.fpdu(tagged(wire.OpWrite, true, e.rw.STag(), e.rw.IOVA(), []byte("abcd")))
		}, wire.CauseDDPTaggedInvalidSTag},
		{"read from write-only region", func(p *rawPeer, e *env) []byte {
			return readReq(p, wire.ReadRequest{SinkSTag: 5, Size: 16, SrcSTag: e.rw.STag(), SrcTO: e.rw.IOVA()})
		}, wire.CauseRDMAPAccessRights},
		{"read past the end", func(p *rawPeer, e *env) []byte {
			return readReq(p, wire.ReadRequest{SinkSTag: 5, Size: 4097, SrcSTag: e.ro.STag(), SrcTO: e.ro.IOVA()})
		}, wire.CauseRDMAPBaseBounds},
		{"read from unknown STag", func(p *rawPeer, e *env) []byte {
			return readReq(p, wire.ReadRequest{SinkSTag: 5, Size: 16, SrcSTag: 0xdead00, SrcTO: 0})
		}, wire.CauseRDMAPInvalidSTag},
		{"reads beyond IRD", func(p *rawPeer, e *env) []byte {
			// Small socket buffers and a peer that does not read make the
			// responses queue up: requests beyond IRD 4 arrive while four
			// are still owed. The Terminate then cannot be sent in the
			// middle of a Read Response (siw skips it too): only the close
			// and the QP's error show it.
			_ = e.srv.qp.conn.SetWriteBuffer(4096)
			_ = p.c.(*net.TCPConn).SetReadBuffer(4096)
			var b []byte
			for i := 0; i < 256; i++ {
				b = append(b, readReq(p, wire.ReadRequest{SinkSTag: 5, Size: 4096, SrcSTag: e.ro.STag(), SrcTO: e.ro.IOVA()})...)
			}
			return b
		}, wire.CauseRDMAPStreamCatastrophic},
		{"send without receive buffer", func(p *rawPeer, e *env) []byte {
			var b []byte
			for i := 0; i < 3; i++ { // two buffers posted
				b = append(b, sendMsg(p, []byte("hello"))...)
			}
			return b
		}, wire.CauseDDPUntaggedNoBuffer},
		{"send longer than its buffer", func(p *rawPeer, e *env) []byte {
			return sendMsg(p, make([]byte, 257))
		}, wire.CauseDDPUntaggedTooLong},
		{"send with wrong MSN", func(p *rawPeer, e *env) []byte {
			return p.fpdu(untagged(wire.OpSend, true, 0, 0, 7, 0, []byte("x")))
		}, wire.CauseDDPUntaggedMSNRange},
		{"send on QN 3", func(p *rawPeer, e *env) []byte {
			return p.fpdu(untagged(wire.OpSend, true, 0, 3, 1, 0, []byte("x")))
		}, wire.CauseDDPUntaggedInvalidQN},
		{"send with wrong MO", func(p *rawPeer, e *env) []byte {
			return append(p.fpdu(untagged(wire.OpSend, false, 0, 0, 1, 0, []byte("abcd"))), p.fpdu(untagged(wire.OpSend, true, 0, 0, 1, 8, []byte("x")))...)
		}, wire.CauseDDPUntaggedInvalidMO},
		{"send with invalidate of unknown STag", func(p *rawPeer, e *env) []byte {
			return p.fpdu(untagged(wire.OpSendInv, true, 0x123400, 0, 1, 0, []byte("x")))
		}, wire.CauseRDMAPCannotInvalidate},
		{"read response without read", func(p *rawPeer, e *env) []byte {
			return p.fpdu(tagged(wire.OpReadResponse, true, 1, 0, []byte("x")))
		}, wire.CauseRDMAPUnexpectedOpcode},
		{"opcode 9", func(p *rawPeer, e *env) []byte {
			b := p.fpdu(untagged(wire.OpSend, true, 0, 0, 1, 0, []byte("x")))
			b[3] = 0x49
			return b
		}, wire.CauseRDMAPUnexpectedOpcode},
		{"DDP version 2", func(p *rawPeer, e *env) []byte {
			b := p.fpdu(untagged(wire.OpSend, true, 0, 0, 1, 0, []byte("x")))
			b[2] = 0x42
			return b
		}, wire.CauseDDPUntaggedBadVersion},
		{"RDMAP version 0", func(p *rawPeer, e *env) []byte {
			b := p.fpdu(untagged(wire.OpSend, true, 0, 0, 1, 0, []byte("x")))
			b[3] = 0x03
			return b
		}, wire.CauseRDMAPBadVersion},
		{"ULPDU shorter than its header", func(p *rawPeer, e *env) []byte {
			return []byte{0, 4, 0x41, 0x43, 0, 0, 0, 0}
		}, wire.CauseDDPUntaggedTooLong},
		{"CRC error", func(p *rawPeer, e *env) []byte {
			p.crc = true
			b := sendMsg(p, []byte("data"))
			b[len(b)-1] ^= 0xff
			return b
		}, wire.CauseLLPCRC},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{}
			if tc.cause == wire.CauseLLPCRC {
				cfg.CRC = CRCOffered
			}
			ln, ch := acceptOne(t, cfg, QPAttr{IRD: 4}, 2)
			p, _, err := dialRaw(t, ln.Addr().String(), stdRequest())
			if err != nil {
				t.Fatal(err)
			}
			srv := <-ch
			e := &env{srv: srv}
			e.rw, _ = srv.pd.RegisterMemory(make([]byte, 4096), AccessRemoteWrite|AccessLocalWrite)
			e.ro, _ = srv.pd.RegisterMemory(make([]byte, 4096), AccessRemoteRead)
			other := NewPD()
			e.foreign, _ = other.RegisterMemory(make([]byte, 4096), AccessRemoteWrite)
			// Make the foreign STag land on a valid index of srv's PD: a
			// region of another PD must not be reachable by its STag.
			p.send(tc.bytes(p, e))
			if tc.cause == wire.CauseRDMAPStreamCatastrophic {
				waitDone(t, srv.qp)
			} else {
				term, err := p.readTerminate()
				if err != nil {
					t.Fatal(err)
				}
				if term.Cause != tc.cause {
					t.Fatalf("terminate cause %v, want %v", term.Cause, tc.cause)
				}
			}
			p.c.Close()
			waitDone(t, srv.qp)
			var te *wire.TermError
			if !errors.As(srv.qp.Err(), &te) || te.Cause != tc.cause {
				t.Fatalf("QP error %v", srv.qp.Err())
			}
			// Messages before the error complete; the outstanding
			// receives complete with an error status.
			okRecvs := 0
			if tc.cause == wire.CauseDDPUntaggedNoBuffer {
				okRecvs = 2
			}
			for i := 0; srv.rcq.Len() > 0; i++ {
				if wc := wait(t, srv.rcq); (wc.Status == WCSuccess) != (i < okRecvs) {
					t.Fatalf("receive %d: %+v", i, wc)
				}
			}
		})
	}
}

// TestTerminateReceived checks a Terminate from the peer ends the QP with a
// *TerminateError, in RFC and in siw layout.
func TestTerminateReceived(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload []byte
		siw     bool
	}{
		{"rfc", []byte{0x12, 0x02, 0, 0}, false},
		{"siw", []byte{0x21, 0x02, 0x03, 0, 0, 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, ch := acceptOne(t, nil, QPAttr{}, 4)
			p, _, err := dialRaw(t, ln.Addr().String(), stdRequest())
			if err != nil {
				t.Fatal(err)
			}
			srv := <-ch
			// A pending send to flush.
			if err := srv.qp.PostSend(&SendWR{ID: 9, Opcode: WRSend, Local: [][]byte{[]byte("x")}}); err != nil {
				t.Fatal(err)
			}
			pl := append([]byte(nil), tc.payload...)
			pl = append(pl, make([]byte, -len(pl)&3)...)
			p.send(p.fpdu(untagged(wire.OpTerminate, true, 0, 2, 1, 0, pl)))
			waitDone(t, srv.qp)
			var te *TerminateError
			if !errors.As(srv.qp.Err(), &te) || !te.Remote || te.Cause != wire.CauseDDPUntaggedNoBuffer || te.SIWLayout != tc.siw {
				t.Fatalf("QP error %#v", srv.qp.Err())
			}
		})
	}
}

func TestFlushOnPeerClose(t *testing.T) {
	cli, srv := pair(t, pairOpts{serverRecvs: [][]byte{make([]byte, 16), make([]byte, 16)}})
	mr, _ := srv.pd.RegisterMemory(make([]byte, 1<<20), AccessRemoteRead)
	sink, _ := cli.pd.RegisterMemory(make([]byte, 1<<20), AccessLocalWrite)
	_ = mr
	// A read that the server will never answer: the server never sees it
	// because the client's socket is closed right after.
	_ = cli.qp.PostSend(&SendWR{ID: 1, Opcode: WRRead, Signaled: true, RemoteSTag: 0x12345600, SinkMR: sink, Length: 16})
	cli.qp.conn.Close() // abrupt: as a dead peer
	waitDone(t, srv.qp)
	if !errors.Is(srv.qp.Err(), ErrPeerClosed) && srv.qp.Err() == nil {
		t.Fatalf("server error %v", srv.qp.Err())
	}
	for i := 0; i < 2; i++ {
		if wc := wait(t, srv.rcq); wc.Status != WCFlushErr || wc.Opcode != WCRecv {
			t.Fatalf("wc %+v", wc)
		}
	}
	waitDone(t, cli.qp)
	if wc := wait(t, cli.cq); wc.Status != WCFlushErr || wc.ID != 1 || wc.Opcode != WCRead {
		t.Fatalf("client wc %+v", wc)
	}
	if err := srv.qp.PostSend(&SendWR{Opcode: WRSend}); !errors.Is(err, ErrQPState) {
		t.Fatalf("post after error: %v", err)
	}
}

func TestGracefulDisconnect(t *testing.T) {
	rbufs := [][]byte{make([]byte, 1<<20), make([]byte, 1<<20), make([]byte, 16)}
	cli, srv := pair(t, pairOpts{serverRecvs: rbufs})
	big := pattern(1<<20, 5)
	for i := 0; i < 2; i++ {
		if err := cli.qp.PostSend(&SendWR{Opcode: WRSend, Local: [][]byte{big}}); err != nil {
			t.Fatal(err)
		}
	}
	// Disconnect right away: what was posted still goes out, then FIN.
	cli.qp.Disconnect()
	for i := 0; i < 2; i++ {
		wc := waitOK(t, srv.rcq)
		if !bytes.Equal(rbufs[wc.ID][:wc.ByteLen], big) {
			t.Fatal("data")
		}
	}
	waitDone(t, srv.qp)
	if !errors.Is(srv.qp.Err(), ErrPeerClosed) {
		t.Fatalf("server: %v", srv.qp.Err())
	}
	waitDone(t, cli.qp)
	if err := cli.qp.Err(); err != nil {
		t.Fatalf("client after graceful disconnect: %v", err)
	}
	if wc := wait(t, srv.rcq); wc.Status != WCFlushErr {
		t.Fatalf("last receive %+v", wc)
	}
}

func TestStalledPeer(t *testing.T) {
	ln, ch := acceptOne(t, &Config{StallTimeout: 400 * time.Millisecond}, QPAttr{}, 2)
	p, _, err := dialRaw(t, ln.Addr().String(), stdRequest())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-ch
	b := p.fpdu(untagged(wire.OpSend, true, 0, 0, 1, 0, make([]byte, 100)))
	p.send(b[:50]) // half an FPDU, then silence
	waitDone(t, srv.qp)
	if !errors.Is(srv.qp.Err(), ErrStalled) {
		t.Fatalf("error %v", srv.qp.Err())
	}
}

// TestIdleIsNotStall: a connection idle between FPDUs stays up.
func TestIdleIsNotStall(t *testing.T) {
	cli, srv := pair(t, pairOpts{serverCfg: &Config{StallTimeout: 200 * time.Millisecond}, serverRecvs: [][]byte{make([]byte, 8)}})
	time.Sleep(700 * time.Millisecond)
	if err := cli.qp.PostSend(&SendWR{Opcode: WRSend, Local: [][]byte{[]byte("ok")}}); err != nil {
		t.Fatal(err)
	}
	waitOK(t, srv.rcq)
}

func TestMPAResponderRefusals(t *testing.T) {
	cases := []struct {
		name       string
		raw        []byte
		wantReject bool
	}{
		{"markers", (&wire.MPAFrame{Revision: 2, Enhanced: true, Markers: true, IRD: 1, ORD: 1}).Append(nil), true},
		{"revision 3", (&wire.MPAFrame{Revision: 3}).Append(nil), false},
		{"bad key", append([]byte("MPA ID Xyz Frame"), 0, 1, 0, 0), false},
		{"reply key", (&wire.MPAFrame{Reply: true, Revision: 1}).Append(nil), false},
		{"private data over 256", (&wire.MPAFrame{Revision: 1, PrivateData: make([]byte, 300)}).Append(nil), false},
		{"enhanced without header", append([]byte(wire.MPAKeyRequest), 0x10, 2, 0, 0), false},
		{"data behind the request", append((&wire.MPAFrame{Revision: 2, Enhanced: true}).Append(nil), 0, 0, 0, 0), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := Listen("tcp", "127.0.0.1:0", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(hang))
			_, _ = c.Write(tc.raw)
			got, _ := io.ReadAll(c)
			if tc.wantReject {
				rep, _, err := wire.ParseMPAFrame(got, 512)
				if err != nil || !rep.Reply || !rep.Reject || rep.Markers {
					t.Fatalf("want a reject reply, got %x (%v)", got, err)
				}
			} else if len(got) != 0 {
				t.Fatalf("want a silent close, got %x", got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if r, err := ln.Accept(ctx); err == nil {
				t.Fatalf("request delivered: %+v", r)
			}
		})
	}
}

func TestMPARevision1AndReject(t *testing.T) {
	// A revision 1 request gets a revision 1 reply without IRD/ORD.
	ln, err := Listen("tcp", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			req, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			if string(req.PrivateData) == "reject me" {
				_ = req.Reject([]byte("no"))
				continue
			}
			s := newSide(t, QPAttr{})
			_ = req.Accept(s.qp, []byte("v1 ok"))
			t.Cleanup(func() { s.qp.Close() })
		}
	}()
	cli := newSide(t, QPAttr{})
	if err := Dial(context.Background(), "tcp", ln.Addr().String(), cli.qp, nil, &Config{MPARevision: 1}); err != nil {
		t.Fatal(err)
	}
	defer cli.qp.Close()
	if string(cli.qp.PeerPrivateData()) != "v1 ok" {
		t.Fatalf("private data %q", cli.qp.PeerPrivateData())
	}
	// Rejections come back as *RejectError with the data, in v1 and v2.
	for _, rev := range []uint8{1, 2} {
		q := newSide(t, QPAttr{})
		err := Dial(context.Background(), "tcp", ln.Addr().String(), q.qp, []byte("reject me"), &Config{MPARevision: rev})
		var re *RejectError
		if !errors.As(err, &re) || string(re.PrivateData) != "no" {
			t.Fatalf("rev %d: %v", rev, err)
		}
	}
}

func TestPeerToPeerRTR(t *testing.T) {
	// Our initiator offers Write and Read RTRs; our responder picks Write.
	cli, srv := pair(t, pairOpts{clientCfg: &Config{PeerToPeer: true}, client: QPAttr{ORD: 1}, clientRecvs: [][]byte{make([]byte, 8)}})
	if !cli.qp.neg.p2p || cli.qp.neg.rtr != wire.RTRWrite || !srv.qp.neg.p2p {
		t.Fatalf("negotiated %+v / %+v", cli.qp.neg, srv.qp.neg)
	}
	// After the RTR, the responder may send first.
	if err := srv.qp.PostSend(&SendWR{Opcode: WRSend, Local: [][]byte{[]byte("first")}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitOK(t, cli.rcq); wc.ByteLen != 5 {
		t.Fatalf("wc %+v", wc)
	}
	// Read RTR: a responder that only gets Read offered (raw initiator).
	ln, ch := acceptOne(t, nil, QPAttr{}, 2)
	req := stdRequest()
	req.P2P, req.RTR = true, wire.RTRRead
	p, rep, err := dialRaw(t, ln.Addr().String(), req)
	if err != nil || !rep.P2P || rep.RTR != wire.RTRRead {
		t.Fatalf("reply %+v %v", rep, err)
	}
	s := <-ch
	body := make([]byte, wire.ReadRequestLen)
	(&wire.ReadRequest{SrcSTag: 1}).Encode(body)
	p.send(p.fpdu(untagged(wire.OpReadRequest, true, 0, 1, 1, 0, body)))
	// The responder answers with a zero-length Read Response.
	var hdr [wire.TaggedHeaderLen + 4]byte
	if _, err := io.ReadFull(p.c, hdr[:]); err != nil {
		t.Fatal(err)
	}
	var h wire.Header
	if _, err := wire.DecodeHeader(hdr[:], &h); err != nil || h.Opcode != wire.OpReadResponse || h.PayloadLen() != 0 || h.STag != 0 {
		t.Fatalf("RTR response %+v %v", h, err)
	}
	_ = s.qp.PostSend(&SendWR{Opcode: WRSend, Local: [][]byte{[]byte("hi")}})
	if _, err := io.ReadFull(p.c, hdr[:]); err != nil {
		t.Fatal(err)
	}
}

func TestMPATimeouts(t *testing.T) {
	// A responder drops a connection that sends no request in time.
	ln, err := Listen("tcp", "127.0.0.1:0", &Config{ConnectTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(hang))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("want EOF, got %v", err)
	}
	// An initiator gives up on a silent responder.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := silent.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	q := newSide(t, QPAttr{})
	start := time.Now()
	err = Dial(context.Background(), "tcp", silent.Addr().String(), q.qp, nil, &Config{ConnectTimeout: 300 * time.Millisecond})
	if err == nil || time.Since(start) > hang {
		t.Fatalf("dial: %v after %v", err, time.Since(start))
	}
	silent.Close()
	wg.Wait()
}

func TestPeerDisconnectStages(t *testing.T) {
	req0 := stdRequest()
	full := req0.Append(nil)
	stages := []struct {
		name string
		send []byte
	}{
		{"nothing", nil},
		{"half a request header", full[:10]},
		{"header without private data", append([]byte(wire.MPAKeyRequest), 0x10, 2, 0, 36)},
	}
	for _, st := range stages {
		t.Run(st.name, func(t *testing.T) {
			ln, err := Listen("tcp", "127.0.0.1:0", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write(st.send)
			c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if _, err := ln.Accept(ctx); err == nil {
				t.Fatal("request delivered")
			}
		})
	}
	// After the reply, at and inside FPDUs.
	for _, cut := range []int{0, 1, 3, 19, 20, 30} {
		t.Run(fmt.Sprintf("fpdu cut at %d", cut), func(t *testing.T) {
			ln, ch := acceptOne(t, nil, QPAttr{}, 2)
			p, _, err := dialRaw(t, ln.Addr().String(), stdRequest())
			if err != nil {
				t.Fatal(err)
			}
			srv := <-ch
			b := p.fpdu(untagged(wire.OpSend, true, 0, 0, 1, 0, make([]byte, 16)))
			p.send(b[:cut])
			p.c.Close()
			waitDone(t, srv.qp)
			if !errors.Is(srv.qp.Err(), ErrPeerClosed) {
				t.Fatalf("error %v", srv.qp.Err())
			}
		})
	}
	// The responder going away before replying.
	t.Run("responder closes before reply", func(t *testing.T) {
		ln, err := Listen("tcp", "127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			req, err := ln.Accept(context.Background())
			if err == nil {
				req.conn.Close()
			}
		}()
		q := newSide(t, QPAttr{})
		if err := Dial(context.Background(), "tcp", ln.Addr().String(), q.qp, nil, nil); err == nil {
			t.Fatal("dial succeeded")
		}
		ln.Close()
	})
}

// TestNudgeSilentResponder: an initiator whose first FPDU gets no answer
// sends zero-length RDMA Writes (Config.Nudge) until the responder speaks,
// and none once it has.
func TestNudgeSilentResponder(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type frame struct {
		h   wire.Header
		err error
	}
	frames := make(chan frame, 16)
	srvConn := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		srvConn <- c
		if _, err := readMPAFrame(c, 512); err != nil {
			return
		}
		rep := wire.MPAFrame{Reply: true, Revision: 2, Enhanced: true, IRD: 4, ORD: 4}
		_, _ = c.Write(rep.Append(nil))
		for {
			var hdr [wire.UntaggedHeaderLen]byte
			if _, err := io.ReadFull(c, hdr[:wire.MinHeaderLen]); err != nil {
				frames <- frame{err: err}
				return
			}
			var h wire.Header
			n, _ := wire.DecodeHeader(hdr[:wire.MinHeaderLen], &h)
			if _, err := io.ReadFull(c, hdr[wire.MinHeaderLen:n]); err != nil {
				frames <- frame{err: err}
				return
			}
			_, _ = wire.DecodeHeader(hdr[:n], &h)
			if _, err := io.CopyN(io.Discard, c, int64(h.FPDULen()-n)); err != nil {
				frames <- frame{err: err}
				return
			}
			frames <- frame{h: h}
		}
	}()
	cli := newSide(t, QPAttr{})
	_ = cli.qp.PostRecv(&RecvWR{Buf: make([]byte, 16)})
	if err := Dial(context.Background(), "tcp", l.Addr().String(), cli.qp, nil, &Config{Nudge: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	defer cli.qp.Close()
	c := <-srvConn
	// Before the initiator sends anything there is nothing to nudge for.
	select {
	case f := <-frames:
		t.Fatalf("FPDU before the first send: %+v", f)
	case <-time.After(200 * time.Millisecond):
	}
	if err := cli.qp.PostSend(&SendWR{Opcode: WRSend, Local: [][]byte{[]byte("connect")}}); err != nil {
		t.Fatal(err)
	}
	next := func() wire.Header {
		select {
		case f := <-frames:
			if f.err != nil {
				t.Fatal(f.err)
			}
			return f.h
		case <-time.After(hang):
			t.Fatal("no FPDU")
		}
		return wire.Header{}
	}
	if h := next(); h.Opcode != wire.OpSend {
		t.Fatalf("first FPDU %+v", h)
	}
	for i := 0; i < 2; i++ {
		if h := next(); h.Opcode != wire.OpWrite || h.PayloadLen() != 0 || h.STag != 0 || !h.Last {
			t.Fatalf("nudge %d: %+v", i, h)
		}
	}
	// The responder speaks: no more nudges.
	var fr [wire.UntaggedHeaderLen + 4]byte
	wire.PutUntaggedHeader(fr[:], wire.OpSend, true, 0, 0, 1, 0, 0)
	if _, err := c.Write(fr[:]); err != nil {
		t.Fatal(err)
	}
	waitOK(t, cli.rcq)
	drain := time.After(time.Second)
	crossed := 0
	for {
		select {
		case f := <-frames:
			// One nudge may have crossed the responder's message.
			if f.err != nil || f.h.Opcode != wire.OpWrite || crossed > 0 {
				t.Fatalf("unexpected %+v after the responder spoke", f)
			}
			crossed++
		case <-drain:
			return
		}
	}
}

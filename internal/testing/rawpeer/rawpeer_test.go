package rawpeer_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/iwarp"
	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// engine is the project's iWARP engine as the responder a raw peer talks
// to, over loopback TCP.
type engine struct {
	qp  *iwarp.QP
	pd  *iwarp.PD
	cq  *iwarp.CQ
	mr  *iwarp.MR
	buf []byte
	rx  [][]byte
}

func listen(t *testing.T, crc iwarp.CRCPolicy) (string, <-chan *engine) {
	t.Helper()
	ln, err := iwarp.Listen("tcp", "127.0.0.1:0", &iwarp.Config{CRC: crc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan *engine, 1)
	go func() {
		defer close(ch)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		e := &engine{pd: iwarp.NewPD(), cq: iwarp.NewCQ(64), buf: make([]byte, 8192)}
		e.mr, err = e.pd.RegisterMemory(e.buf, iwarp.AccessLocalWrite|iwarp.AccessRemoteRead|iwarp.AccessRemoteWrite)
		if err != nil {
			return
		}
		e.qp, err = iwarp.NewQP(iwarp.QPAttr{PD: e.pd, SendCQ: e.cq, RecvCQ: e.cq, IRD: 4, ORD: 4})
		if err != nil {
			return
		}
		for i := range 4 {
			b := make([]byte, 256)
			e.rx = append(e.rx, b)
			_ = e.qp.PostRecv(&iwarp.RecvWR{ID: uint64(i), Buf: b})
		}
		if err := req.Accept(e.qp, []byte("accept")); err != nil {
			return
		}
		ch <- e
	}()
	return ln.Addr().String(), ch
}

func (e *engine) wait(t *testing.T) iwarp.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wc [1]iwarp.WC
	if _, err := e.cq.PollWait(ctx, wc[:]); err != nil {
		t.Fatalf("engine completion: %v", err)
	}
	return wc[0]
}

// TestAgainstEngine drives every message type of the raw peer against the
// engine, with and without MPA CRCs: Sends both ways, RDMA Writes both
// ways (placed in the peer's registered memory), an RDMA Read the peer
// answers from its memory, a Send with Invalidate of the peer's STag, and
// a bad FPDU answered by a Terminate.
func TestAgainstEngine(t *testing.T) {
	for _, crc := range []bool{false, true} {
		t.Run(map[bool]string{false: "no CRC", true: "CRC"}[crc], func(t *testing.T) {
			addr, accepted := listen(t, iwarp.CRCOff)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := rawpeer.Dial(ctx, addr, rawpeer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := rawpeer.Request([]byte("request"))
			req.CRC = crc
			rep, err := c.Handshake(req, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if string(rep.PrivateData) != "accept" || c.CRC != crc {
				t.Fatalf("reply private data %q, CRC %v", rep.PrivateData, c.CRC)
			}
			e := <-accepted
			if e == nil {
				t.Fatal("the engine did not accept")
			}
			q := rawpeer.NewQueue(c)

			// Send, peer to engine.
			if err := c.Send([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			if wc := e.wait(t); wc.Opcode != iwarp.WCRecv || wc.Status != iwarp.WCSuccess || string(e.rx[wc.ID][:wc.ByteLen]) != "hello" {
				t.Fatalf("engine receive: %+v", wc)
			}

			// RDMA Write and Send with Invalidate, engine to peer.
			mem := q.Register(make([]byte, 4096), true, true)
			copy(mem.Buf[2048:], "host data")
			payload := bytes.Repeat([]byte{0xAB}, 1000)
			if err := e.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRWrite, Local: [][]byte{payload}, RemoteSTag: mem.STag, RemoteTO: mem.TO + 100}); err != nil {
				t.Fatal(err)
			}
			cqe := make([]byte, 16)
			cqe[12] = 0x42 // CID
			if err := e.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRSendInv, Local: [][]byte{cqe}, InvalidateSTag: mem.STag, Signaled: true}); err != nil {
				t.Fatal(err)
			}
			var got rawpeer.Event
			for got.Kind != rawpeer.EvCQE {
				if got, err = q.Next(time.Now().Add(30 * time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			if got.CQE.CID() != 0x42 || got.Invalidate != mem.STag || !mem.Invalidated || !bytes.Equal(mem.Buf[100:1100], payload) {
				t.Fatalf("engine's Write and Send with Invalidate: CID %#x, invalidate %#x", got.CQE.CID(), got.Invalidate)
			}
			e.wait(t) // the Send's completion

			// RDMA Read by the engine, answered by the peer.
			if err := e.qp.PostSend(&iwarp.SendWR{ID: 7, Opcode: iwarp.WRRead, Signaled: true, RemoteSTag: mem.STag, RemoteTO: mem.TO + 2048, SinkMR: e.mr, Length: 9}); err != nil {
				t.Fatal(err)
			}
			if ev, err := q.Next(time.Now().Add(30 * time.Second)); err != nil || ev.Kind != rawpeer.EvReadRequest || !ev.Answered {
				t.Fatalf("Read Request: %+v %v", ev.Kind, err)
			}
			if wc := e.wait(t); wc.Opcode != iwarp.WCRead || wc.Status != iwarp.WCSuccess || string(e.buf[:9]) != "host data" {
				t.Fatalf("engine Read: %+v %q", wc, e.buf[:9])
			}

			// RDMA Write, peer to engine.
			if err := c.SendTagged(wire.OpWrite, e.mr.STag(), e.mr.IOVA()+4096, []byte("written"), time.Time{}); err != nil {
				t.Fatal(err)
			}
			if err := c.Send([]byte("fence")); err != nil {
				t.Fatal(err)
			}
			e.wait(t)
			if string(e.buf[4096:4103]) != "written" {
				t.Fatalf("peer's RDMA Write: %q", e.buf[4096:4103])
			}
			if v := q.Violations(); len(v) > 0 {
				t.Fatalf("violations: %v", v)
			}

			// A Send with the wrong MSN: a Terminate, then the close.
			if err := c.WriteRaw(c.Frame(rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, 99, 0, []byte("x")))); err != nil {
				t.Fatal(err)
			}
			how, frames := c.WaitClosed(time.Now().Add(30 * time.Second))
			terms := rawpeer.Terminates(frames)
			if how == rawpeer.Open || len(terms) != 1 || terms[0].Cause != wire.CauseDDPUntaggedMSNRange {
				t.Fatalf("after a bad MSN: %v, terminates %v", how, terms)
			}
			for _, f := range frames {
				if !f.CRCOK {
					t.Errorf("FPDU %v with a bad CRC", f.Header.Opcode)
				}
			}
		})
	}
}

// TestAbortIsRST: Abort resets the connection (the responder sees
// ECONNRESET); Close after CloseWrite is a FIN.
func TestAbortIsRST(t *testing.T) {
	for _, abort := range []bool{true, false} {
		addr, accepted := listen(t, iwarp.CRCOff)
		c, err := rawpeer.Dial(context.Background(), addr, rawpeer.Options{RecvBuffer: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Handshake(rawpeer.Request(nil), time.Time{}); err != nil {
			t.Fatal(err)
		}
		e := <-accepted
		if err := c.Send([]byte("x")); err != nil {
			t.Fatal(err)
		}
		e.wait(t)
		if abort {
			c.Abort()
		} else {
			c.CloseWrite()
		}
		select {
		case <-e.qp.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the engine did not see the close")
		}
		err = e.qp.Err()
		if reset := err != nil && bytes.Contains([]byte(err.Error()), []byte("reset")); reset != abort {
			t.Errorf("abort %v: the engine's error %v", abort, err)
		}
		c.Close()
	}
}

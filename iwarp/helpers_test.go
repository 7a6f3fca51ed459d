package iwarp

import (
	"context"
	"sync"
	"testing"
	"time"
)

// side is one end of a test connection with polled CQs.
type side struct {
	pd  *PD
	cq  *CQ
	qp  *QP
	rcq *CQ
}

func newSide(t testing.TB, attr QPAttr) *side {
	t.Helper()
	s := &side{pd: NewPD(), cq: NewCQ(256), rcq: NewCQ(256)}
	attr.PD, attr.SendCQ, attr.RecvCQ = s.pd, s.cq, s.rcq
	qp, err := NewQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	s.qp = qp
	return s
}

type pairOpts struct {
	client, server       QPAttr
	clientCfg, serverCfg *Config
	clientPD, serverPD   []byte
	serverRecvs          [][]byte
	clientRecvs          [][]byte
}

// pair connects two QPs over loopback TCP.
func pair(t testing.TB, o pairOpts) (cli, srv *side) {
	t.Helper()
	ln, err := Listen("tcp", "127.0.0.1:0", o.serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cli = newSide(t, o.client)
	srv = newSide(t, o.server)
	for i, b := range o.serverRecvs {
		if err := srv.qp.PostRecv(&RecvWR{ID: uint64(i), Buf: b}); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range o.clientRecvs {
		if err := cli.qp.PostRecv(&RecvWR{ID: uint64(i), Buf: b}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var aerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		req, err := ln.Accept(ctx)
		if err != nil {
			aerr = err
			return
		}
		aerr = req.Accept(srv.qp, o.serverPD)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := Dial(ctx, "tcp", ln.Addr().String(), cli.qp, o.clientPD, o.clientCfg); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if aerr != nil {
		t.Fatal(aerr)
	}
	t.Cleanup(func() {
		cli.qp.Close()
		srv.qp.Close()
	})
	return cli, srv
}

// hang is how long a test waits for something the engine does at once (a
// completion, a close, an accept): a hang guard, generous so that a loaded
// machine never fails it, never a bound the engine must meet.
const hang = time.Minute

// wait polls one completion from cq.
func wait(t testing.TB, cq *CQ) WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	var wc [1]WC
	if _, err := cq.PollWait(ctx, wc[:]); err != nil {
		t.Fatalf("waiting for a completion: %v", err)
	}
	return wc[0]
}

func waitOK(t testing.TB, cq *CQ) WC {
	t.Helper()
	wc := wait(t, cq)
	if wc.Status != WCSuccess {
		t.Fatalf("completion %+v: %v", wc, wc.Status)
	}
	return wc
}

func waitDone(t testing.TB, qp *QP) {
	t.Helper()
	select {
	case <-qp.Done():
	case <-time.After(hang):
		t.Fatalf("QP not done; state %v", qp.State())
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

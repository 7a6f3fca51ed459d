package tcp

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawtcp"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// TestBusyPoll: with Config.BusyPoll a queue reads its socket through the
// socket reader with the spin time, I/O through
// it is intact (a 4 KiB in-capsule write read back), and the PDU timeout
// still ends a PDU cut short (RawConn reads honour the read deadline).
func TestBusyPoll(t *testing.T) {
	for _, spin := range []time.Duration{0, 200 * time.Microsecond} {
		ln, err := Listen("tcp", "127.0.0.1:0", Config{BusyPoll: spin, PDUTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		m := newMemHandler()
		got := make(chan *QueueRequest, 1)
		go func() {
			r, err := ln.Accept(context.Background())
			if err == nil {
				_, _ = r.Accept(m)
				got <- r
			}
		}()
		h := dial(t, ln, wire.Digests{})
		h.Connect(1, 32, "", 0, 0)
		r := <-got
		data := bytes.Repeat([]byte{0x5a, 0xa5}, 2048)
		h.Capsule(rawtcp.RWSQE(nvmeof.NVMWrite, 7, 0, len(data), true), data)
		if st := h.CQE(7, nil); st != nvmeof.StatusSuccess {
			t.Fatalf("spin %v: write %v", spin, st)
		}
		back := make([]byte, len(data))
		h.Capsule(rawtcp.RWSQE(nvmeof.NVMRead, 8, 0, len(back), false), nil)
		if st := h.CQE(8, back); st != nvmeof.StatusSuccess || !bytes.Equal(back, data) {
			t.Fatalf("spin %v: read %v, same data %v", spin, st, bytes.Equal(back, data))
		}
		pr, ok := r.src.(*pollConn)
		if !ok || pr.spin != spin || pr.reads.Load() == 0 {
			t.Errorf("spin %v: the queue reads through the socket reader (%v) with the spin time", spin, ok)
		}
		// A PDU cut short: the PDU timeout (200 ms) closes the queue.
		h.Send(h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, rawtcp.RWSQE(nvmeof.NVMRead, 9, 0, 4096, false)[:], nil)[:20])
		h.ExpectClose()
	}
}

// TestHostBusyPoll: with HostConfig.BusyPoll the host queue reads its
// socket through the socket reader with the spin time, and I/O through it is intact.
func TestHostBusyPoll(t *testing.T) {
	for _, spin := range []time.Duration{0, 200 * time.Microsecond} {
		m := newMemHandler()
		ln := serve(t, Config{}, m)
		q := hostConnect(t, ln.Addr().String(), 1, HostConfig{BusyPoll: spin})
		ctx := context.Background()
		data := bytes.Repeat([]byte{0x5a, 0xa5}, 4096)
		var r nvmeof.HostRequest
		rw(&r, true, 0, data)
		if err := q.Do(ctx, &r); err != nil {
			t.Fatalf("spin %v: write: %v", spin, err)
		}
		back := make([]byte, len(data))
		rw(&r, false, 0, back)
		if err := q.Do(ctx, &r); err != nil || !bytes.Equal(back, data) {
			t.Fatalf("spin %v: read %v, same data %v", spin, err, bytes.Equal(back, data))
		}
		if q.poll == nil || q.poll.spin != spin || q.poll.reads.Load() == 0 {
			t.Errorf("spin %v: the host queue reads through the socket reader (%v) with the spin time", spin, q.poll != nil)
		}
	}
}

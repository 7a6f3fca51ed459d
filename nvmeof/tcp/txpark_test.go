package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawtcp"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// The writers of a queue that busy polls (issue 25): a writer that finds the
// socket full parks on the poller (txParked) and the receive goroutine stops
// spinning while it waits, so the scheduler polls the network and wakes the
// writer when the peer makes room (pollConn). The spin time in these tests
// is an hour: a receive loop that does not give way to a parked writer
// never parks, and the tests see it by counters, not by time.
const spinForever = time.Hour

// hostFillSocket dials rc with busy polling and submits in-capsule writes
// from a goroutine until one of them waits for socket space (the raw
// controller does not read). It returns the queue and the submitter's
// result (nil once every write is out).
func hostFillSocket(t *testing.T, rc *rawController, writeTimeout time.Duration) (*HostQueue, net.Conn, chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dialed := make(chan error, 1)
	var q *HostQueue
	go func() {
		var err error
		q, err = Dial(ctx, "tcp", rc.ln.Addr().String(), HostConfig{QID: 1, QueueSize: 64, InlineDataSize: 64 << 10,
			BusyPoll: spinForever, WriteTimeout: writeTimeout})
		dialed <- err
	}()
	c := <-rc.conn
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
	// The peer's close first: a receive loop that spins (before the
	// writers were parked-aware: for an hour) returns at the EOF.
	t.Cleanup(func() { _ = c.Close(); q.Close() })
	// Small socket buffers: 63 writes of 64 KiB (4 MiB) fill them.
	_ = q.conn.(*net.TCPConn).SetWriteBuffer(32 << 10)
	_ = c.(*net.TCPConn).SetReadBuffer(32 << 10)
	res := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		for i := range q.Size() - 1 {
			r := &nvmeof.HostRequest{Done: func(*nvmeof.HostRequest) {}}
			rw(r, true, uint64(i)*128, buf)
			if err := q.Submit(r); err != nil {
				res <- err
				return
			}
		}
		res <- nil
	}()
	waitFor(t, "a host writer parked on the full socket", func() bool { return q.poll.txParked.Load() })
	return q, c, res
}

// TestHostWriterParkedStopsSpin: with busy polling, a host writer (Submit)
// blocked on a full socket is counted as parked, and the receive
// goroutine, spinning for PDUs meanwhile, parks instead (SpinYields) until
// the write is through; when the controller reads again every write
// completes. Checked to fail without the receive loop's txParked check
// (poll.go pollConn.read): SpinYields stayed 0 and the wait ran out.
func TestHostWriterParkedStopsSpin(t *testing.T) {
	rc := newRawController(t, nil)
	q, c, res := hostFillSocket(t, rc, time.Minute)
	waitFor(t, "the receive loop giving way to the parked writer", func() bool { return q.Stats().SpinYields > 0 })
	if st := q.Stats(); st.WriteParks == 0 {
		t.Fatalf("a write waited for socket space but WriteParks is 0: %+v", st)
	}
	// The controller reads again: the writer is woken and gets through.
	go func() { _, _ = io.Copy(io.Discard, c) }()
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("submit after the controller read again: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the parked writer was not through a minute after the controller read again")
	}
	if q.poll.txParked.Load() {
		t.Error("txParked still set after every write is out")
	}
	t.Logf("%+v", q.Stats())
}

// TestHostWriteTimeoutWhileParked: a controller that stops reading: the
// parked writer's write deadline (WriteTimeout) still ends the write and
// closes the queue, with busy polling on.
func TestHostWriteTimeoutWhileParked(t *testing.T) {
	rc := newRawController(t, nil)
	q, _, res := hostFillSocket(t, rc, 300*time.Millisecond)
	select {
	case err := <-res:
		// The Submit whose write timed out, or (the receive goroutine
		// saw the connection closed first and ended its command) the
		// next one.
		if !errors.Is(err, nvmeof.ErrQueueClosed) {
			t.Fatalf("a write to a controller that reads nothing: %v, want the queue closed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a write to a controller that reads nothing still waits a minute later (WriteTimeout 300ms)")
	}
	select {
	case <-q.Done():
	case <-time.After(time.Minute):
		t.Fatal("the queue did not end after its write timed out")
	}
	if err := q.Err(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the queue ended for %v, want its write deadline", err)
	}
	if q.poll.txParked.Load() {
		t.Error("txParked still set after the write ended")
	}
}

// heldReads is memHandler whose reads are completed by another goroutine
// when the test says so (as a backend completes them), not by the receive
// goroutine.
type heldReads struct {
	*memHandler
	mu        sync.Mutex
	reads     []*Request
	completed atomic.Int32
}

func (h *heldReads) HandleCommand(r *Request) {
	if sqe := r.SQE(); !sqe.IsFabrics() && sqe.Opcode() == nvmeof.NVMRead {
		h.mu.Lock()
		h.reads = append(h.reads, r)
		h.mu.Unlock()
		return
	}
	h.memHandler.HandleCommand(r)
}

func (h *heldReads) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.reads)
}

// release completes the held reads from a goroutine of its own.
func (h *heldReads) release() {
	h.mu.Lock()
	reads := h.reads
	h.reads = nil
	h.mu.Unlock()
	go func() {
		for _, r := range reads {
			h.memHandler.HandleCommand(r)
			h.completed.Add(1)
		}
	}()
}

// controllerFillSocket: a raw host that sends n reads of 128 KiB to a
// controller queue that busy polls; their completions, written by another
// goroutine while the receive goroutine spins for the next PDU, fill the
// socket (the host reads nothing).
func controllerFillSocket(t *testing.T, writeTimeout time.Duration, n int) (*ControllerQueue, *heldReads, net.Conn) {
	t.Helper()
	ln, err := Listen("tcp", "127.0.0.1:0", Config{BusyPoll: spinForever, WriteTimeout: writeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	h := &heldReads{memHandler: newMemHandler()}
	got := make(chan *ControllerQueue, 1)
	go func() {
		r, err := ln.Accept(context.Background())
		if err == nil {
			q, _ := r.Accept(h)
			got <- q
		}
	}()
	host := dial(t, ln, wire.Digests{})
	host.Connect(1, n+1, "", 0, 0)
	q := <-got
	_ = q.conn.(*net.TCPConn).SetWriteBuffer(32 << 10)
	_ = host.Conn.(*net.TCPConn).SetReadBuffer(32 << 10)
	for i := range n {
		host.Capsule(rawtcp.RWSQE(nvmeof.NVMRead, uint16(i+10), 0, 128<<10, false), nil)
	}
	waitFor(t, "the controller holding every read", func() bool { return h.held() == n })
	h.release()
	waitFor(t, "a controller writer parked on the full socket", func() bool { return q.br.sock.txParked.Load() })
	return q, h, host.Conn
}

// TestControllerWriterParkedStopsSpin: the controller's side of
// TestHostWriterParkedStopsSpin: read completions written by a backend's
// goroutine park on a full socket, the receive goroutine stops spinning
// meanwhile, and once the host reads every completion is written.
// Checked to fail without the receive loop's txParked check, as the
// host's.
func TestControllerWriterParkedStopsSpin(t *testing.T) {
	const n = 32 // 4 MiB of C2HData
	q, h, c := controllerFillSocket(t, time.Minute, n)
	waitFor(t, "the receive loop giving way to the parked writer", func() bool { return q.Stats().SpinYields > 0 })
	if st := q.Stats(); st.WriteParks == 0 {
		t.Fatalf("a write waited for socket space but WriteParks is 0: %+v", st)
	}
	go func() { _, _ = io.Copy(io.Discard, c) }()
	waitFor(t, "every read completed once the host reads", func() bool { return h.completed.Load() == n })
	waitFor(t, "txParked cleared", func() bool { return !q.br.sock.txParked.Load() })
	t.Logf("%+v", q.Stats())
}

// TestControllerWriteTimeoutWhileParked: a host that stops reading: the
// parked writer's write deadline (Config.WriteTimeout) still closes the
// queue, with busy polling on.
func TestControllerWriteTimeoutWhileParked(t *testing.T) {
	q, h, _ := controllerFillSocket(t, 300*time.Millisecond, 32)
	select {
	case <-q.Done():
	case <-time.After(time.Minute):
		t.Fatal("a queue whose host reads nothing is still open a minute later (WriteTimeout 300ms)")
	}
	waitFor(t, "the held reads completed (their writes fail)", func() bool { return h.completed.Load() == 32 })
	if q.br.sock.txParked.Load() {
		t.Error("txParked still set after the write ended")
	}
}

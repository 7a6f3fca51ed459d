package hostile

import (
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestCrashDoubleCompletion is issue 8 defect 1: a host that stops reading
// its socket, sends 64 Reads of 128 KiB with 32 keyed 4 KiB Writes spread
// among them (one Write after every two Reads) and then ends the
// connection. The target's RDMA Writes stall on the full socket with the
// Read Requests for the Writes' data laid out behind them; when the
// connection fails, each of those work requests must be flushed exactly
// once. Before the fix QP.finish flushed them from the send queue and from
// the outstanding-read queue, DataReady ran twice and the daemon died with
// a nil dereference in SQE.CID. Each variant runs three times against one
// daemon; the daemon must stay up and serve a legitimate host.
//
// Bound: none on the target's side (the daemon must just survive); the
// stall is observed in /proc/net/tcp (the daemon's socket holds unsent
// bytes and the raw host's socket holds unread ones) before the close.
func TestCrashDoubleCompletion(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"RST", "FIN"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, config{})
			for i := range 3 {
				stalledReadsThenClose(t, d, how == "RST", i)
				d.healthy(t, "after the stalled host's connection ended ("+how+")")
			}
		})
	}
}

func stalledReadsThenClose(t *testing.T, d *daemon, rst bool, round int) {
	t.Helper()
	h := evilHost(t, d, evilNQN, evilID, 60000, rawpeer.Options{})
	defer h.Close()
	q := ioQueue(t, d, h, 1, 128, rawpeer.Options{RecvBuffer: 4096})
	readBuf := q.Register(make([]byte, 64*128<<10), false, true)
	writeBuf := q.Register(make([]byte, 32*4096), true, false)
	for i := range writeBuf.Buf {
		writeBuf.Buf[i] = byte(i*7 + round)
	}
	nr, nw := 0, 0
	for i := range 96 {
		var sqe *nvmeof.SQE
		if i%3 == 2 {
			sqe = rwSQE(true, uint64(nw*8), 4096, writeBuf, nw*4096)
			nw++
		} else {
			sqe = rwSQE(false, uint64(nr*256), 128<<10, readBuf, nr*(128<<10))
			nr++
		}
		sqe.SetCID(q.NextCID())
		if err := q.Command(sqe, nil); err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	// The host reads nothing: wait until the target has taken every
	// capsule and its writes are stuck on the full socket.
	local := q.LocalAddr().Port
	took, ok := waitFor(guard(time.Second), func() bool {
		mine, theirs, ok1, ok2 := tcpPair(d.port, local)
		return ok1 && ok2 && theirs.rxQueue == 0 && theirs.txQueue > 0 && mine.rxQueue > 0
	})
	mine, theirs, _, _ := tcpPair(d.port, local)
	if !ok {
		t.Fatalf("the target's writes did not stall (daemon socket tx %d rx %d, host rx %d)", theirs.txQueue, theirs.rxQueue, mine.rxQueue)
	}
	t.Logf("round %d: target stalled after %v: %d bytes unsent at the target, %d unread at the host", round, took.Round(time.Millisecond), theirs.txQueue, mine.rxQueue)
	if rst {
		_ = q.Abort()
	} else if err := q.CloseWrite(); err != nil {
		// FIN with the read side still unread (a close() with unread
		// bytes would be an RST): the target sees the end of the stream.
		t.Fatal(err)
	}
	// Settle until the daemon has closed its side, for at most 2 s (after
	// a FIN a daemon may also go on writing, until write_timeout). Nothing
	// is asserted here: a crash shows in the health check that follows, or
	// in the daemon's log when the test ends; a daemon slower than 2 s
	// gets the RST below, which ends the connection just as well.
	took, ok = d.waitSocketClosed(theirs.inode, 2*time.Second)
	t.Logf("round %d: the daemon closed its side: %v (%v)", round, ok, took.Round(time.Millisecond))
	_ = q.Abort()
}

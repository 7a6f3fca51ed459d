package hostile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// chunkPattern is the content of 4 KiB chunk i of the namespace in
// TestHalfPostedResponse: the chunk number in every 8-byte word, so that a
// chunk holding another chunk's bytes is recognised.
func chunkPattern(i int) []byte {
	b := make([]byte, 4096)
	for o := 0; o < len(b); o += 8 {
		binary.LittleEndian.PutUint64(b[o:], uint64(i)<<32|0xC0DE0000|uint64(o))
	}
	return b
}

// TestHalfPostedResponse is issue 8 defect 2: a response is an RDMA Write
// of the data and a Send of the CQE; when the first post succeeds and the
// second finds the send queue full, the data buffer went back to the pool
// while the Write still pointed into it, so the next command's data went
// out under the first one's key. Black box: a host with a small receive
// buffer stops reading and sends 2000 4 KiB Reads of distinct chunks (far
// more than its queue of 16, whose send queue holds 64 work requests)
// into distinct places of its memory, waits until the target has taken
// every capsule, then reads again. Every place of its memory must hold
// either nothing (the sentinel) or exactly the chunk it asked for; every
// Read must be answered, unless the target ends the connection (a
// Terminate, or a close) — a target may refuse a host that exceeds its
// queue, it may not hand it wrong data or leave it waiting forever.
//
// Bound: the responses the target owes must arrive while the host reads;
// the test waits guard(1s) after the last FPDU before it calls a response
// lost.
func TestHalfPostedResponse(t *testing.T) {
	t.Parallel()
	const n = 2000
	d := startDaemon(t, config{})
	// The namespace: chunk i holds chunkPattern(i), written by the
	// legitimate host.
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cfg := d.legitConfig()
		cfg.QueueSize = 0 // the initiator's default
		c, err := initiator.Connect(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		all := make([]byte, 0, n*4096)
		for i := range n {
			all = append(all, chunkPattern(i)...)
		}
		if _, err := c.Namespace(1).WriteAtContext(ctx, all, 0); err != nil {
			t.Fatal(err)
		}
	}()

	h := evilHost(t, d, evilNQN, evilID, 60000, rawpeer.Options{})
	q := ioQueue(t, d, h, 1, 16, rawpeer.Options{RecvBuffer: 4096})
	mem := q.Register(bytes.Repeat([]byte{0xEE}, n*4096), false, true)
	// The host sends its Reads in bursts of eight while it reads, one FPDU
	// at a time with a pause, from its small socket buffer: the target's
	// send queue fills up and drains by a few entries at a time while
	// commands keep arriving, the interleaving that half-posted responses
	// need. Then it stops reading until the target has taken every capsule
	// and reads everything.
	var (
		sent     int
		answered = map[uint16]nvmeof.Status{}
		term     *rawpeer.Event
		how      = rawpeer.Open
		readErr  error
	)
	handle := func(ev rawpeer.Event) {
		switch ev.Kind {
		case rawpeer.EvCQE:
			answered[ev.CQE.CID()] = ev.CQE.Status()
		case rawpeer.EvTerminate:
			term = &ev
			t.Logf("the target sent a Terminate: %v", ev.Terminate.Cause)
		}
	}
	stopReading := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-stopReading:
				return
			default:
			}
			ev, err := q.Next(deadline(50 * time.Millisecond))
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if err != nil {
				readErr = err
				return
			}
			handle(ev)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	for i := range n {
		sqe := rwSQE(false, uint64(i*8), 4096, mem, i*4096)
		if i%2 == 1 {
			// Every other command fails at once (no such namespace): its
			// response is one work request, a Read's two, so the send
			// queue's fill level takes every value, the last free entry
			// included.
			sqe.SetNSID(7)
		}
		sqe.SetCID(uint16(i))
		// A target may stop reading a host that exceeds its queue: a
		// write that does not finish in 2 s ends the sending.
		if err := q.SendMessage(0x3, 0, sqe[:], deadline(2*time.Second)); err != nil {
			t.Logf("sending stopped after %d of %d commands: %v", i, n, err)
			break
		}
		sent++
		if i%8 == 7 {
			time.Sleep(time.Millisecond)
		}
	}
	close(stopReading)
	<-readerDone
	local := q.LocalAddr().Port
	took, ok := waitFor(guard(time.Second), func() bool {
		_, theirs, _, ok := tcpPair(d.port, local)
		return !ok || theirs.rxQueue == 0
	})
	mine, theirs, _, _ := tcpPair(d.port, local)
	t.Logf("%d commands sent (every other one a Read), %d answered so far; the target took them all %v later; %d bytes unsent at the target, %d unread at the host",
		sent, len(answered), took.Round(time.Millisecond), theirs.txQueue, mine.rxQueue)
	if !ok {
		t.Logf("the target did not read everything the host sent (%d bytes left)", theirs.rxQueue)
	}
	// Read everything: every response, until all arrived or the target
	// closes.
	for readErr == nil && len(answered) < sent {
		ev, err := q.Next(deadline(guard(time.Second)))
		if err != nil {
			readErr = err
			break
		}
		handle(ev)
	}
	if readErr != nil && !errors.Is(readErr, os.ErrDeadlineExceeded) {
		how = rawpeer.ByRST
		if errors.Is(readErr, errEOF) {
			how = rawpeer.ByFIN
		}
		t.Logf("connection ended: %v", readErr)
	}
	d.alive(t, "after the host that read nothing")

	// The data: every chunk place holds the sentinel or its own chunk.
	corrupt, placed := 0, 0
	sentinel := bytes.Repeat([]byte{0xEE}, 4096)
	for i := 0; i < sent; i += 2 {
		got := mem.Buf[i*4096 : (i+1)*4096]
		switch {
		case bytes.Equal(got, sentinel):
		case bytes.Equal(got, chunkPattern(i)):
			placed++
		default:
			if corrupt < 5 {
				t.Errorf("Read %d (chunk %d) placed wrong data: first words %x, want %x", i, i, got[:16], chunkPattern(i)[:16])
			}
			corrupt++
		}
	}
	failed := 0
	for cid, st := range answered {
		if st != nvmeof.StatusSuccess {
			failed++
			if cid%2 == 0 {
				t.Errorf("Read %d failed: %v", cid, st)
			}
		} else if !bytes.Equal(mem.Buf[int(cid)*4096:int(cid+1)*4096], chunkPattern(int(cid))) {
			t.Errorf("Read %d completed with success but its data is not chunk %d", cid, cid)
		}
	}
	t.Logf("%d commands sent, %d answered (%d with an error status, as every other one must be), %d chunks placed, %d corrupt; end: %v, terminate: %v",
		sent, len(answered), failed, placed, corrupt, how, term != nil)
	if corrupt > 0 {
		t.Errorf("%d Reads got another command's data (the data buffer was reused under a pending RDMA Write)", corrupt)
	}
	if len(answered) < sent && how == rawpeer.Open && term == nil {
		t.Errorf("%d of %d commands never answered and the connection stays open (responses lost)", sent-len(answered), sent)
	}
	if v := q.Violations(); len(v) > 0 {
		t.Errorf("the target broke the host's rules: %v", v[:min(len(v), 5)])
	}
	q.Close()
	d.healthy(t, "after the host that read nothing")
}

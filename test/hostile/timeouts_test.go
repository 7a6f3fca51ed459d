package hostile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/iwarp/wire"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestPendingConnections is issue 8 defect 3 (memory per handshake): a
// connection that has not completed a successful Fabrics Connect holds
// resources, so it must be closed within transport.connect_timeout of the
// TCP accept whatever it does meanwhile: nothing at all, part of an MPA
// request, a complete MPA exchange and then silence (admin or I/O queue),
// a Connect whose data it never lets the target fetch, or a refused
// Connect. Ten peers of each kind at once; each must be closed within
// guard(connect_timeout), measured from before its TCP connect.
//
// Bound: transport.connect_timeout = 2s (after issue 8 it bounds TCP accept
// to a successful Fabrics Connect; before, only the MPA exchange).
func TestPendingConnections(t *testing.T) {
	t.Parallel()
	const bound = 2 * time.Second
	d := startDaemon(t, config{Transport: []string{"connect_timeout: 2s"}})
	dial := func(qid uint16, size int) (*rawpeer.Queue, error) {
		ctx, cancel := context.WithTimeout(context.Background(), guard(bound))
		defer cancel()
		return rawpeer.DialQueue(ctx, d.addr, rawpeer.QueueRequest(rawpeer.CMRequest(qid, size)), rawpeer.Options{})
	}
	kinds := []struct {
		name string
		// open makes the connection misbehave and returns it. An error
		// that is the daemon closing or refusing the connection (a
		// pending-connection limit may do that early) counts as closed.
		open func() (*rawpeer.Conn, error)
	}{
		{"TCP only", func() (*rawpeer.Conn, error) {
			return rawpeer.Dial(context.Background(), d.addr, rawpeer.Options{})
		}},
		{"half an MPA request", func() (*rawpeer.Conn, error) {
			c, err := rawpeer.Dial(context.Background(), d.addr, rawpeer.Options{})
			if err != nil {
				return nil, err
			}
			f := rawpeer.QueueRequest(rawpeer.CMRequest(0, 32))
			return c, c.WriteRaw(f.Append(nil)[:30])
		}},
		{"silent after MPA (admin queue)", func() (*rawpeer.Conn, error) {
			q, err := dial(0, 32)
			return connOf(q), err
		}},
		{"silent after MPA (I/O queue of 128)", func() (*rawpeer.Conn, error) {
			q, err := dial(1, 128)
			return connOf(q), err
		}},
		{"Connect whose data is never fetched", func() (*rawpeer.Conn, error) {
			q, err := dial(0, 32)
			if err != nil {
				return connOf(q), err
			}
			q.IgnoreReads = true
			sqe, _ := q.ConnectSQE(rawpeer.ConnectData(subNQN, evilNQN, evilID, nvmeof.CNTLIDDynamic), 60000, false)
			sqe.SetCID(1)
			if err := q.Command(sqe, nil); err != nil {
				return q.Conn, err
			}
			// Wait for the Read Request that the host will never answer.
			for {
				ev, err := q.Next(deadline(guard(bound)))
				if err != nil || ev.Kind == rawpeer.EvReadRequest {
					return q.Conn, err
				}
			}
		}},
		{"refused Connect, then silent", func() (*rawpeer.Conn, error) {
			q, err := dial(0, 32)
			if err != nil {
				return connOf(q), err
			}
			cqe, err := q.Connect(rawpeer.ConnectData("nqn.2024-01.io.nvmetd.hostile:nope", evilNQN, evilID, nvmeof.CNTLIDDynamic), 60000, false, deadline(guard(bound)))
			if err == nil && cqe.Status() == nvmeof.StatusSuccess {
				err = errors.New("a Connect to an unknown subsystem succeeded")
			}
			return q.Conn, err
		}},
		{"I/O Connect to no controller, then silent", func() (*rawpeer.Conn, error) {
			q, err := dial(1, 32)
			if err != nil {
				return connOf(q), err
			}
			cqe, err := q.Connect(rawpeer.ConnectData(subNQN, evilNQN, evilID, 0x1234), 0, true, deadline(guard(bound)))
			if err == nil && cqe.Status() == nvmeof.StatusSuccess {
				err = errors.New("an I/O Connect to CNTLID 0x1234 succeeded")
			}
			return q.Conn, err
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			const peers = 10
			var wg sync.WaitGroup
			var mu sync.Mutex
			var worst time.Duration
			open, early := 0, 0
			for i := range peers {
				start := time.Now()
				c, err := k.open()
				if err != nil {
					if !isClosure(err) {
						t.Fatalf("peer %d: %v", i, err)
					}
					// Closed or refused before it was done misbehaving.
					mu.Lock()
					early++
					worst = max(worst, time.Since(start))
					mu.Unlock()
					if c != nil {
						c.Abort()
					}
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Abort()
					how, _ := c.WaitClosed(start.Add(guard(bound)))
					took := time.Since(start)
					mu.Lock()
					defer mu.Unlock()
					worst = max(worst, took)
					if how == rawpeer.Open {
						open++
						if open == 1 {
							t.Errorf("peer %d: still open %v after its TCP connect (bound connect_timeout %v, guard %v)",
								i, took.Round(time.Millisecond), bound, guard(bound))
						}
					}
				}()
			}
			wg.Wait()
			if open > 0 {
				t.Errorf("%d of %d peers never closed", open, peers)
			} else {
				t.Logf("%d peers closed (%d of them before they were done); the last after %v (bound %v)", peers, early, worst.Round(time.Millisecond), bound)
			}
		})
	}
	t.Cleanup(func() { d.healthy(t, "after the pending connections") })
}

// TestStallTimeout is issue 8 defect 4, partial headers: a connected host
// that sends the first n bytes of an FPDU and stops must be closed within
// transport.stall_timeout. Before the fix, 1 to 3 bytes (less than the 4
// the header decoder needs) were never timed out; 4 and more were.
//
// Bound: transport.stall_timeout = 1s (the admin queue is connected, its
// keep-alive is 60 s, so nothing else closes it).
func TestStallTimeout(t *testing.T) {
	t.Parallel()
	const bound = time.Second
	d := startDaemon(t, config{Transport: []string{"stall_timeout: 1s"}})
	for _, n := range []int{1, 2, 3, 4, 10, 21} {
		t.Run(fmt.Sprintf("%d bytes", n), func(t *testing.T) {
			t.Parallel()
			h := evilHost(t, d, evilNQN, evilID, 60000, rawpeer.Options{})
			var sqe nvmeof.SQE
			sqe.BuildKeepAlive()
			sqe.SGL1().SetNull()
			msn := h.Admin.NextMSN(wire.QNSend)
			fpdu := h.Admin.Frame(rawpeer.Untagged(wire.OpSend, true, 0, wire.QNSend, msn, 0, sqe[:]))
			start := time.Now()
			if err := h.Admin.WriteRaw(fpdu[:n]); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, h.Admin.Conn, fmt.Sprintf("host stalled after %d bytes of an FPDU", n), start, bound)
		})
	}
	t.Cleanup(func() { d.healthy(t, "after the stalled hosts") })
}

// TestWriteTimeout is issue 8 defect 4, write progress: a host that never
// reads its socket pins the queue's responses; the target must close a
// queue whose socket takes no bytes for transport.write_timeout while it
// has something to send — whether the host then goes quiet or keeps
// sending commands (which keeps the receive side busy and must not count
// as progress).
//
// Bound: transport.write_timeout = 2s (a key issue 8 adds; before, the
// daemon refuses the configuration and the test fails at start).
func TestWriteTimeout(t *testing.T) {
	t.Parallel()
	const bound = 2 * time.Second
	d := startDaemon(t, config{Transport: []string{"write_timeout: 2s"}})
	for _, keepSending := range []bool{false, true} {
		name := "queue full, then quiet"
		if keepSending {
			name = "keeps sending commands"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := evilHost(t, d, evilNQN, evilID, 60000, rawpeer.Options{})
			q := ioQueue(t, d, h, 1, 32, rawpeer.Options{RecvBuffer: 4096})
			mem := q.Register(make([]byte, 32*128<<10), false, true)
			for i := range 32 {
				sqe := rwSQE(false, uint64(i*256), 128<<10, mem, i*(128<<10))
				sqe.SetCID(uint16(i))
				if err := q.Command(sqe, nil); err != nil {
					t.Fatal(err)
				}
			}
			// Wait until the target's writes stall (its socket holds bytes
			// the host does not read), or until the target has closed its
			// socket already: on a loaded machine write_timeout may run out
			// before the test looks.
			local := q.LocalAddr().Port
			var inode uint64
			if _, ok := waitFor(guard(time.Second), func() bool {
				mine, theirs, ok1, ok2 := tcpPair(d.port, local)
				if !ok2 || !d.holdsSocket(theirs.inode) {
					return true
				}
				inode = theirs.inode
				return ok1 && theirs.txQueue > 0 && mine.rxQueue > 0
			}); !ok {
				t.Fatal("the target's writes did not stall")
			}
			start := time.Now()
			stop := make(chan struct{})
			var sendErr error
			var wg sync.WaitGroup
			if keepSending {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 32; ; i++ {
						select {
						case <-stop:
							return
						case <-time.After(20 * time.Millisecond):
						}
						// The host sends more than its queue holds: a
						// target may also answer that with a Terminate.
						sqe := rwSQE(false, uint64((i%32)*256), 4096, mem, 0)
						sqe.SetCID(uint16(i))
						if err := q.SendMessage(wire.OpSend, 0, sqe[:], deadline(time.Second)); err != nil {
							if !errors.Is(err, os.ErrDeadlineExceeded) {
								sendErr = err
								return
							}
						}
					}
				}()
			}
			// The host does not read: watch the target's socket instead.
			took, ok := d.waitSocketClosed(inode, guard(bound))
			close(stop)
			wg.Wait()
			if !ok {
				t.Errorf("a host that reads nothing is still connected %v later (bound write_timeout %v)", took.Round(time.Millisecond), bound)
			} else {
				t.Logf("closed %v after its writes stalled (bound %v); sending: %v", time.Since(start).Round(time.Millisecond), bound, sendErr)
			}
			_ = q.Abort()
		})
	}
	t.Cleanup(func() { d.healthy(t, "after the hosts that read nothing") })
}

// connOf is a queue's connection, or nil.
func connOf(q *rawpeer.Queue) *rawpeer.Conn {
	if q == nil {
		return nil
	}
	return q.Conn
}

// isClosure reports whether err is the daemon ending or refusing a
// connection: a close (FIN or RST), an MPA reject, or a Terminate.
func isClosure(err error) bool {
	var rej *rawpeer.CMRejectedError
	var mrej *rawpeer.RejectedError
	var term *rawpeer.TerminatedError
	return errors.As(err, &rej) || errors.As(err, &mrej) || errors.As(err, &term) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// TestKeepAliveClamp is issue 8 defect 4, KATO: a host's keep-alive
// timeout is clamped to [tuning.keep_alive_min, tuning.keep_alive_max],
// and KATO 0 is raised to tuning.keep_alive, so that no controller lives
// forever: a host that connects, enables its controller and goes silent
// (its TCP connection open) loses the controller, and the admin queue is
// closed, within two keep-alive timeouts. `nvmetd status` reports the
// timeout in effect.
//
// Bound: 2 × the clamped KATO (tuning.keep_alive 1s, keep_alive_min 1s,
// keep_alive_max 10s). keep_alive_max also clamps the legitimate host that
// checks the daemon afterwards, which cannot ask for more: it is 10 s, not
// shorter, so that the legitimate host's Keep Alives are never late on a
// loaded machine.
func TestKeepAliveClamp(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, config{
		Tuning: []string{"keep_alive: 1s", "keep_alive_min: 1s", "keep_alive_max: 10s"},
		// The legitimate host asks for what the daemon grants at most.
		LegitKATO: 10 * time.Second,
	})
	for i, tc := range []struct {
		name string
		kato uint32 // requested, ms
		want time.Duration
	}{
		{"KATO 0", 0, time.Second},
		{"KATO 1 h", 3600000, 10 * time.Second},
		{"KATO 100 ms", 100, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nqn := fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:e5170000-0000-4000-8000-0000000000%02d", i)
			ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
			defer cancel()
			h, err := rawpeer.ConnectHost(ctx, d.addr, subNQN, nqn, hostID(i), tc.kato, rawpeer.Options{})
			if err != nil {
				d.alive(t, "before a raw host connected")
				t.Fatalf("raw host connect: %v", err)
			}
			t.Cleanup(h.Close)
			// The keep-alive timer runs from the Connect. The host enables
			// its controller, as a host does, but a loaded machine may
			// delay it by more than the 1 s tested: a controller torn down
			// before that is the daemon doing what is tested, and then
			// there is no KATO to read in the status.
			start := time.Now()
			if err := h.Enable(deadline(guard(tc.want))); err != nil {
				if !refused(err) {
					d.alive(t, "before a raw host enabled its controller")
					t.Fatalf("raw host enable: %v", err)
				}
				t.Logf("the controller was torn down before the host had enabled it (%v)", err)
			} else {
				listed := false
				for _, c := range d.status(t).Target.Controllers {
					if c.HostNQN != nqn {
						continue
					}
					listed = true
					if time.Duration(c.KATO)*time.Millisecond != tc.want {
						t.Errorf("status: KATO %d ms in effect for a requested %d ms, want %v", c.KATO, tc.kato, tc.want)
					}
				}
				if !listed {
					t.Logf("the controller was torn down before the status was read")
				}
			}
			how, _ := waitClosed(t, h.Admin.Conn, "admin queue of a silent host", start, 2*tc.want)
			limit := guard(2 * tc.want)
			if how == rawpeer.Open {
				limit = 0 // the failure is reported; just look once
			}
			if _, ok := waitFor(limit, func() bool { return d.status(t).controllersOf(nqn) == 0 }); !ok {
				t.Errorf("the silent host's controller is still listed")
			}
		})
	}
	t.Cleanup(func() { d.healthy(t, "after the silent hosts") })
}

package hostile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// The limits issue 8 adds (configuration section "limits"; before the fix
// the daemon refuses the section as an unknown key and these tests fail at
// start):
//
//	limits.max_pending               connections accepted but not yet past a
//	                                 successful Fabrics Connect, daemon-wide;
//	                                 when full the OLDEST pending one is
//	                                 closed to make room
//	limits.max_pending_per_address   the same per remote IP address
//	limits.max_connections           all connections of the daemon
//	limits.max_controllers_per_host  controllers per host NQN
//	limits.max_queues_per_host       queues per host NQN

// openSilent opens n queue connections one after the other (each completes
// its MPA exchange, or is refused, before the next starts) and returns
// them in order; a refused one is nil.
func openSilent(t *testing.T, d *daemon, n int, o rawpeer.Options) []*rawpeer.Queue {
	t.Helper()
	out := make([]*rawpeer.Queue, n)
	for i := range out {
		ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
		q, err := rawpeer.DialQueue(ctx, d.addr, rawpeer.QueueRequest(rawpeer.CMRequest(1, 32)), o)
		cancel()
		if err == nil {
			out[i] = q
			t.Cleanup(func() { q.Abort() })
		}
	}
	return out
}

// closedWithin reports whether the daemon closes c within limit.
func closedWithin(c *rawpeer.Queue, limit time.Duration) bool {
	if c == nil {
		return true
	}
	how, _ := c.WaitClosed(time.Now().Add(limit))
	return how != rawpeer.Open
}

// TestLimitsMaxPending: with limits.max_pending 8, twenty connections
// that complete MPA one after the other and then stay silent leave eight:
// the twelve oldest are closed to make room, and a legitimate host (itself
// pending while it connects) gets in.
//
// Bound: a pending connection is closed when a newer one needs its place
// (guard 30 s); connect_timeout is 5 minutes so that it does not do it.
func TestLimitsMaxPending(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, config{Transport: []string{"connect_timeout: 5m"}, Limits: []string{"max_pending: 8"}})
	qs := openSilent(t, d, 20, rawpeer.Options{})
	for i, q := range qs[:12] {
		if !closedWithin(q, guard(time.Second)) {
			t.Errorf("pending connection %d of 20 (one of the 12 oldest) still open; max_pending 8", i+1)
		}
	}
	d.healthy(t, "with max_pending reached")
}

// TestLimitsMaxPendingPerAddress: with limits.max_pending_per_address 4,
// ten silent connections from 127.0.0.1 leave four (the six oldest are
// closed), while a host connecting from 127.0.0.2 is not affected and a
// legitimate host from 127.0.0.1 still gets in.
//
// Bound: as TestLimitsMaxPending.
func TestLimitsMaxPendingPerAddress(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, config{Transport: []string{"connect_timeout: 5m"},
		Limits: []string{"max_pending: 100", "max_pending_per_address: 4"}})
	qs := openSilent(t, d, 10, rawpeer.Options{})
	for i, q := range qs[:6] {
		if !closedWithin(q, guard(time.Second)) {
			t.Errorf("pending connection %d of 10 from 127.0.0.1 (one of the 6 oldest) still open; max_pending_per_address 4", i+1)
		}
	}
	other := rawpeer.Options{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
	defer cancel()
	h, err := rawpeer.ConnectHost(ctx, d.addr, subNQN, evilNQN2, evilID2, 60000, other)
	if err != nil {
		t.Errorf("a host from 127.0.0.2: %v", err)
	} else {
		h.Close()
	}
	d.healthy(t, "with max_pending_per_address reached")
}

// TestLimitsMaxConnections: with limits.max_connections 16, ten connected
// hosts (one admin queue each) and then twenty silent peers: the daemon
// never holds more than 16 connections of the port once it has dealt with
// them, the connected hosts keep working, and a legitimate host gets in
// (the oldest pending connections make room).
//
// Bound: guard 30 s for the daemon to get back under the limit.
func TestLimitsMaxConnections(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, config{Transport: []string{"connect_timeout: 5m"},
		Limits: []string{"max_pending: 100", "max_connections: 16"}})
	var hosts []*rawpeer.Host
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
		h, err := rawpeer.ConnectHost(ctx, d.addr, subNQN, fmt.Sprintf("%s-%d", evilNQN, i), hostID(200+i), 60000, rawpeer.Options{})
		cancel()
		if err != nil {
			t.Fatalf("connected host %d: %v", i, err)
		}
		t.Cleanup(h.Close)
		hosts = append(hosts, h)
	}
	openSilent(t, d, 20, rawpeer.Options{})
	held := 0
	if _, ok := waitFor(guard(time.Second), func() bool {
		held = d.portConnections()
		return held <= 16
	}); !ok {
		t.Errorf("the daemon holds %d connections of its port; max_connections 16", held)
	}
	for i, h := range hosts {
		// Property Get of CSTS: valid before the controller is enabled
		// (Keep Alive is not: nvmet_check_ctrl_status).
		var sqe nvmeof.SQE
		sqe.BuildPropertyGet(nvmeof.PropCSTS)
		sqe.SGL1().SetNull()
		if cqe, err := h.Admin.Do(&sqe, nil, deadline(guard(time.Second))); err != nil || cqe.Status() != nvmeof.StatusSuccess {
			t.Errorf("connected host %d lost its admin queue to the flood: %v %v", i, cqe.Status(), err)
		}
	}
	d.healthy(t, "with max_connections reached")
}

// portConnections counts the daemon's established connections on its port.
func (d *daemon) portConnections() int {
	socks, err := tcpSockets()
	if err != nil {
		return -1
	}
	n := 0
	for _, s := range socks {
		if s.localPort == d.port && s.state == tcpEstablished {
			n++
		}
	}
	return n
}

// refused reports whether a queue or Connect attempt was refused in one of
// the ways a target may refuse it: a close or reject (isClosure), or a
// Connect completed with an error status. A timeout is not a refusal.
func refused(err error) bool {
	var st *rawpeer.StatusError
	return errors.As(err, &st) || isClosure(err)
}

// TestLimitsPerHost: with limits.max_controllers_per_host 2, a third
// controller of the same host NQN is refused, and allowed again once one
// of the first two is gone; with limits.max_queues_per_host 4, a host
// that opens eight I/O queues gets three or four of them (whether the
// admin queue counts is the daemon's choice) and the others are refused.
// Another host is not affected.
//
// Bound: a refusal answers the CM request or the Connect (guard 30 s).
func TestLimitsPerHost(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, config{
		Limits: []string{"max_controllers_per_host: 2", "max_queues_per_host: 4"}})
	connect := func() (*rawpeer.Host, error) {
		ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
		defer cancel()
		return rawpeer.ConnectHost(ctx, d.addr, subNQN, evilNQN, evilID, 60000, rawpeer.Options{})
	}
	var ctrls []*rawpeer.Host
	for i := range 3 {
		h, err := connect()
		switch {
		case i < 2 && err != nil:
			t.Fatalf("controller %d of the host: %v", i+1, err)
		case i < 2:
			ctrls = append(ctrls, h)
			t.Cleanup(h.Close)
		case err == nil:
			h.Close()
			t.Errorf("a third controller of the host was created; max_controllers_per_host 2")
		case !refused(err):
			t.Errorf("third controller: %v; want a refusal", err)
		default:
			t.Logf("third controller refused: %v", err)
		}
	}
	// One goes away: a new one is allowed (once the daemon has noticed).
	ctrls[0].Close()
	var h *rawpeer.Host
	if _, ok := waitFor(guard(time.Second), func() bool {
		var err error
		h, err = connect()
		return err == nil
	}); !ok {
		t.Errorf("no new controller after one of the host's two went away")
	} else {
		t.Cleanup(h.Close)
	}

	// Queues: a fresh host opens eight I/O queues.
	ctx, cancel := context.WithTimeout(context.Background(), guard(time.Second))
	defer cancel()
	qh, err := rawpeer.ConnectHost(ctx, d.addr, subNQN, evilNQN2, evilID2, 60000, rawpeer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(qh.Close)
	if err := qh.Enable(deadline(guard(time.Second))); err != nil {
		t.Fatal(err)
	}
	ok := 0
	for qid := uint16(1); qid <= 8; qid++ {
		if _, err := qh.ConnectIO(ctx, qid, 16, rawpeer.Options{}); err == nil {
			ok++
		} else if !refused(err) {
			t.Errorf("I/O queue %d: %v; want a refusal", qid, err)
		} else {
			t.Logf("I/O queue %d refused: %v", qid, err)
		}
	}
	if ok < 3 || ok > 4 {
		t.Errorf("%d of 8 I/O queues connected; max_queues_per_host 4 allows 3 or 4", ok)
	} else {
		t.Logf("%d of 8 I/O queues connected (max_queues_per_host 4)", ok)
	}
	d.healthy(t, "with the per-host limits reached")
}

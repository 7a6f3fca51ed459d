package hostile

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	tcpwire "github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// The connection limits of issue 8 (limits.max_pending,
// max_pending_per_address, max_connections, with the oldest pending
// connection closed to make room) applied to NVMe/TCP ports: their
// connections enter the daemon's one admission with those of the RDMA
// ports (internal/admission). Before, a TCP port refused new connections
// at the accept once limits.max_pending were initializing (a flood kept a
// legitimate host out until its connections timed out), and did not count
// its connections per address or against max_connections.

// dialTCPFrom opens a TCP connection to the daemon's NVMe/TCP port from
// local (nil: any) and, with ic, sends an ICReq and reads the ICResp. It
// returns an error where dialTCP fails the test (a refusal is a result).
func dialTCPFrom(t *testing.T, d *daemon, local net.IP, ic bool) (*tcpPeer, error) {
	t.Helper()
	dl := net.Dialer{Timeout: guard(time.Second)}
	if local != nil {
		dl.LocalAddr = &net.TCPAddr{IP: local}
	}
	c, err := dl.Dial("tcp", d.tcpAddr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	p := &tcpPeer{c: c}
	if !ic {
		return p, nil
	}
	if _, err := c.Write(tcpwire.NewICReq(0, tcpwire.Digests{}, 0)[:]); err != nil {
		return p, err
	}
	var b [tcpwire.ICSize]byte
	_ = c.SetReadDeadline(time.Now().Add(guard(time.Second)))
	defer c.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return p, fmt.Errorf("ICResp: %w", err)
	}
	return p, nil
}

// connectAs runs an admin Connect for host (ICReq first) and returns the
// Connect's status or why there was none.
func (p *tcpPeer) connectAs(host string, id [16]byte) error {
	var d nvmeof.ConnectData
	d.SetHostID(id)
	d.SetCNTLID(nvmeof.CNTLIDDynamic)
	d.SetSubNQN(subNQN)
	d.SetHostNQN(host)
	var sqe nvmeof.SQE
	sqe.BuildConnect(0, 31, 120000)
	sqe.SetCID(1)
	sqe.SetPSDT(1)
	sqe.SGL1().SetIdentifier(nvmeof.SGLIDInCapsule)
	sqe.SGL1().SetInCapsule(0, nvmeof.ConnectDataSize)
	if _, err := p.c.Write(capsule(&sqe, d[:])); err != nil {
		return err
	}
	hdr, err := p.pdu()
	if err != nil {
		return err
	}
	if tcpwire.PDUType(hdr[0]) != tcpwire.TypeCapsuleResp {
		return fmt.Errorf("%s, want CapsuleResp", tcpwire.PDUType(hdr[0]))
	}
	if st := tcpwire.CapsuleCQE(hdr).Status(); st != nvmeof.StatusSuccess {
		return fmt.Errorf("connect: %v", st)
	}
	return nil
}

// pdu reads one PDU (no digests), within guard(1s).
func (p *tcpPeer) pdu() ([]byte, error) {
	_ = p.c.SetReadDeadline(time.Now().Add(guard(time.Second)))
	defer p.c.SetReadDeadline(time.Time{})
	b := make([]byte, tcpwire.CommonHeaderSize)
	if _, err := io.ReadFull(p.c, b); err != nil {
		return nil, err
	}
	h, _ := tcpwire.ParseHeader(b)
	if h.PLen > 1<<20 || h.PLen < tcpwire.CommonHeaderSize {
		return nil, fmt.Errorf("PLEN %d", h.PLen)
	}
	b = append(b, make([]byte, h.PLen-tcpwire.CommonHeaderSize)...)
	_, err := io.ReadFull(p.c, b[tcpwire.CommonHeaderSize:])
	return b, err
}

// propertyGet reads CSTS on an admin queue (valid before the controller is
// enabled) and returns the status or why there was none.
func (p *tcpPeer) propertyGet(cid uint16) error {
	var sqe nvmeof.SQE
	sqe.BuildPropertyGet(nvmeof.PropCSTS)
	sqe.SetCID(cid)
	sqe.SGL1().SetNull()
	if _, err := p.c.Write(capsule(&sqe, nil)); err != nil {
		return err
	}
	hdr, err := p.pdu()
	if err != nil {
		return err
	}
	if tcpwire.PDUType(hdr[0]) != tcpwire.TypeCapsuleResp {
		return fmt.Errorf("%s, want CapsuleResp", tcpwire.PDUType(hdr[0]))
	}
	if st := tcpwire.CapsuleCQE(hdr).Status(); st != nvmeof.StatusSuccess {
		return fmt.Errorf("property get: %v", st)
	}
	return nil
}

// closedWithin reports whether the daemon closes p's connection within
// limit (a nil peer: it was refused).
func (p *tcpPeer) closedWithin(limit time.Duration) bool {
	if p == nil {
		return true
	}
	_ = p.c.SetReadDeadline(time.Now().Add(limit))
	var b [512]byte
	for {
		_, err := p.c.Read(b[:])
		if err != nil {
			return !errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}

// legitimateTCPHost connects a host over NVMe/TCP from local (nil: any)
// and reads CSTS on its admin queue.
func legitimateTCPHost(t *testing.T, d *daemon, local net.IP, n int) error {
	t.Helper()
	p, err := dialTCPFrom(t, d, local, true)
	if err != nil {
		return err
	}
	if err := p.connectAs(fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-%012d", 900+n), hostID(900+n)); err != nil {
		return err
	}
	return p.propertyGet(2)
}

// TestTCPLimitsMaxPending: with limits.max_pending 8, twenty NVMe/TCP
// connections that complete ICReq/ICResp one after the other and then stay
// silent (no Connect) leave eight: the twelve oldest are closed to make
// room, and a legitimate host gets in. Before, the twelve newest were
// closed at the accept and the eight oldest held the port until their
// connect timeout (5 minutes here): the oldest stayed open and the
// legitimate host's ICReq got no answer.
//
// Bound: a pending connection is closed when a newer one needs its place
// (guard 30 s); connect_timeout is 5 minutes so that it does not do it.
func TestTCPLimitsMaxPending(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, config{TCP: true, Transport: []string{"connect_timeout: 5m"}, Limits: []string{"max_pending: 8"}})
	ps := make([]*tcpPeer, 20)
	for i := range ps {
		p, err := dialTCPFrom(t, d, nil, true)
		if err == nil {
			ps[i] = p
		}
	}
	for i, p := range ps[:12] {
		if !p.closedWithin(guard(time.Second)) {
			t.Errorf("pending NVMe/TCP connection %d of 20 (one of the 12 oldest) still open; max_pending 8", i+1)
		}
	}
	if err := legitimateTCPHost(t, d, nil, 1); err != nil {
		t.Errorf("a legitimate NVMe/TCP host with max_pending reached: %v", err)
	}
	d.healthy(t, "with max_pending reached by NVMe/TCP connections")
}

// TestTCPLimitsHalfOpenICReq: with limits.max_pending_per_address 4, ten
// connections from 127.0.0.1 that send half an ICReq and stall leave four
// (the six oldest are closed), while hosts from 127.0.0.2 and from
// 127.0.0.1 still get in over NVMe/TCP. Before, nothing counted TCP
// connections per address: all ten stayed until the connect timeout.
//
// Bound: as TestTCPLimitsMaxPending.
func TestTCPLimitsHalfOpenICReq(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, config{TCP: true, Transport: []string{"connect_timeout: 5m"},
		Limits: []string{"max_pending: 100", "max_pending_per_address: 4"}})
	ps := make([]*tcpPeer, 10)
	for i := range ps {
		p, err := dialTCPFrom(t, d, net.IPv4(127, 0, 0, 1), false)
		if err != nil {
			continue
		}
		_, _ = p.c.Write(tcpwire.NewICReq(0, tcpwire.Digests{}, 0)[:60])
		ps[i] = p // dialed one after the other: accepted in this order
	}
	for i, p := range ps[:6] {
		if !p.closedWithin(guard(time.Second)) {
			t.Errorf("half-open ICReq %d of 10 from 127.0.0.1 (one of the 6 oldest) still open; max_pending_per_address 4", i+1)
		}
	}
	for i, p := range ps[6:] {
		if p.closedWithin(100 * time.Millisecond) {
			t.Errorf("half-open ICReq %d of 10 from 127.0.0.1 (one of the 4 newest) closed; max_pending_per_address 4 keeps it", i+7)
		}
	}
	if err := legitimateTCPHost(t, d, net.IPv4(127, 0, 0, 2), 2); err != nil {
		t.Errorf("a host from 127.0.0.2: %v", err)
	}
	if err := legitimateTCPHost(t, d, net.IPv4(127, 0, 0, 1), 3); err != nil {
		t.Errorf("a host from 127.0.0.1: %v", err)
	}
	d.healthy(t, "with max_pending_per_address reached by half-open ICReqs")
}

// TestTCPFloodMaxConnections: with limits.max_connections 16, ten hosts
// connected over NVMe/TCP (one admin queue each) and then a flood of
// twenty silent TCP connections: the daemon never holds more than 16
// connections of its TCP port once it has dealt with them, the connected
// hosts keep working, and a legitimate host gets in (the oldest pending
// connections make room). Before, max_connections did not count TCP
// connections: the daemon held all thirty.
//
// Bound: guard 30 s for the daemon to get back under the limit.
func TestTCPFloodMaxConnections(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, config{TCP: true, Transport: []string{"connect_timeout: 5m"},
		Limits: []string{"max_pending: 100", "max_pending_per_address: 100", "max_connections: 16"}})
	var hosts []*tcpPeer
	for i := range 10 {
		p, err := dialTCPFrom(t, d, nil, true)
		if err == nil {
			err = p.connectAs(fmt.Sprintf("%s-%d", evilNQN, i), hostID(200+i))
		}
		if err != nil {
			t.Fatalf("connected host %d: %v", i, err)
		}
		hosts = append(hosts, p)
	}
	for range 20 {
		_, _ = dialTCPFrom(t, d, nil, false)
	}
	held := 0
	if _, ok := waitFor(guard(time.Second), func() bool {
		held = d.tcpConnections()
		return held <= 16
	}); !ok {
		t.Errorf("the daemon holds %d connections of its NVMe/TCP port; max_connections 16", held)
	}
	for i, h := range hosts {
		if err := h.propertyGet(uint16(10 + i)); err != nil {
			t.Errorf("connected host %d lost its admin queue to the flood: %v", i, err)
		}
	}
	if err := legitimateTCPHost(t, d, nil, 4); err != nil {
		t.Errorf("a legitimate NVMe/TCP host with max_connections reached: %v", err)
	}
	d.healthy(t, "with max_connections reached by NVMe/TCP connections")
}

// tcpConnections counts the daemon's established connections on its
// NVMe/TCP port.
func (d *daemon) tcpConnections() int {
	socks, err := tcpSockets()
	if err != nil {
		return -1
	}
	port, _ := strconv.Atoi(d.tcpAddr[len("127.0.0.1:"):])
	n := 0
	for _, s := range socks {
		if s.localPort == port && s.state == tcpEstablished {
			n++
		}
	}
	return n
}

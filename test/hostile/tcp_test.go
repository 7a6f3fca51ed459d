package hostile

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	tcpwire "github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// tcpPeer is a raw NVMe/TCP host on one connection to the daemon.
type tcpPeer struct {
	c net.Conn
}

func dialTCP(t *testing.T, d *daemon) *tcpPeer {
	t.Helper()
	c, err := net.Dial("tcp", d.tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &tcpPeer{c: c}
}

// initialize sends ICReq and reads the ICResp.
func (p *tcpPeer) initialize(t *testing.T) {
	t.Helper()
	if _, err := p.c.Write(tcpwire.NewICReq(0, tcpwire.Digests{}, 0)[:]); err != nil {
		t.Fatal(err)
	}
	var b [tcpwire.ICSize]byte
	_ = p.c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(p.c, b[:]); err != nil {
		t.Fatalf("ICResp: %v", err)
	}
	_ = p.c.SetReadDeadline(time.Time{})
}

// capsule is a CapsuleCmd PDU (no digests) with in-capsule data.
func capsule(sqe *nvmeof.SQE, data []byte) []byte {
	h := tcpwire.NewHeader(tcpwire.TypeCapsuleCmd, 0, tcpwire.Digests{}, uint32(len(data)), 0)
	b := make([]byte, tcpwire.CommonHeaderSize)
	h.Put(b)
	return append(append(b, sqe[:]...), data...)
}

// connect runs an admin Connect to the subsystem and waits for its
// CapsuleResp.
func (p *tcpPeer) connect(t *testing.T) {
	t.Helper()
	var d nvmeof.ConnectData
	d.SetHostID(hostID(7))
	d.SetCNTLID(nvmeof.CNTLIDDynamic)
	d.SetSubNQN(subNQN)
	d.SetHostNQN("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000e711")
	var sqe nvmeof.SQE
	sqe.BuildConnect(0, 31, 120000)
	sqe.SetCID(1)
	sqe.SetPSDT(1)
	sqe.SGL1().SetIdentifier(nvmeof.SGLIDInCapsule)
	sqe.SGL1().SetInCapsule(0, nvmeof.ConnectDataSize)
	if _, err := p.c.Write(capsule(&sqe, d[:])); err != nil {
		t.Fatal(err)
	}
	hdr := p.readPDU(t)
	if tcpwire.PDUType(hdr[0]) != tcpwire.TypeCapsuleResp {
		t.Fatalf("%s, want CapsuleResp", tcpwire.PDUType(hdr[0]))
	}
	if st := tcpwire.CapsuleCQE(hdr).Status(); st != nvmeof.StatusSuccess {
		t.Fatalf("connect: %v", st)
	}
}

func (p *tcpPeer) readPDU(t *testing.T) []byte {
	t.Helper()
	_ = p.c.SetReadDeadline(time.Now().Add(time.Minute))
	defer p.c.SetReadDeadline(time.Time{})
	b := make([]byte, tcpwire.CommonHeaderSize)
	if _, err := io.ReadFull(p.c, b); err != nil {
		t.Fatalf("read PDU: %v", err)
	}
	h, _ := tcpwire.ParseHeader(b)
	if h.PLen > 1<<20 || h.PLen < tcpwire.CommonHeaderSize {
		t.Fatalf("PLEN %d", h.PLen)
	}
	b = append(b, make([]byte, h.PLen-tcpwire.CommonHeaderSize)...)
	if _, err := io.ReadFull(p.c, b[tcpwire.CommonHeaderSize:]); err != nil {
		t.Fatalf("read PDU: %v", err)
	}
	return b
}

// closed waits (guard(bound)) for the daemon to close the connection and
// returns the C2HTermReq it sent before, if any.
func (p *tcpPeer) closed(t *testing.T, what string, start time.Time, bound time.Duration) *tcpwire.TermReq {
	t.Helper()
	_ = p.c.SetReadDeadline(start.Add(guard(bound)))
	var term *tcpwire.TermReq
	buf := make([]byte, 0, 4096)
	var b [4096]byte
	for {
		n, err := p.c.Read(b[:])
		buf = append(buf, b[:n]...)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("%s: still open after %v (bound %v)", what, time.Since(start).Round(time.Millisecond), bound)
			}
			break
		}
	}
	t.Logf("%s: closed after %v (bound %v)", what, time.Since(start).Round(time.Millisecond), bound)
	for len(buf) >= tcpwire.CommonHeaderSize {
		h, _ := tcpwire.ParseHeader(buf)
		if h.PLen < tcpwire.CommonHeaderSize || int(h.PLen) > len(buf) {
			break
		}
		if h.Type == tcpwire.TypeC2HTermReq {
			term, _ = tcpwire.ParseTermReq(buf[:h.PLen], false)
		}
		buf = buf[h.PLen:]
	}
	return term
}

// TestTCPHostile: NVMe/TCP peers that stall or break the protocol against
// the daemon's TCP port: each is closed within its bound (guard(bound)
// from before its TCP connect), a protocol error with the C2HTermReq of
// TCP 1.0 §3.6.2.9; five of each kind at once; then a legitimate host
// does I/O.
//
// Bounds: transport.connect_timeout = 2s (TCP accept to a successful
// Connect: no ICReq, half an ICReq, no Connect after ICResp);
// transport.write_timeout = 2s (a PDU cut short, an R2T never answered).
func TestTCPHostile(t *testing.T) {
	t.Parallel()
	const bound = 2 * time.Second
	d := startDaemon(t, config{TCP: true, Transport: []string{"connect_timeout: 2s", "write_timeout: 2s"}})
	kinds := []struct {
		name string
		// open misbehaves on p; wantFES is the C2HTermReq expected (0:
		// a close alone).
		open    func(t *testing.T, p *tcpPeer)
		wantFES tcpwire.FES
	}{
		{"TCP only", func(t *testing.T, p *tcpPeer) {}, 0},
		{"half an ICReq", func(t *testing.T, p *tcpPeer) {
			_, _ = p.c.Write(tcpwire.NewICReq(0, tcpwire.Digests{}, 0)[:60])
		}, 0},
		{"no Connect after ICResp", func(t *testing.T, p *tcpPeer) { p.initialize(t) }, 0},
		{"half a Connect capsule", func(t *testing.T, p *tcpPeer) {
			p.initialize(t)
			var sqe nvmeof.SQE
			sqe.BuildConnect(0, 31, 0)
			_, _ = p.c.Write(capsule(&sqe, make([]byte, 1024))[:500])
		}, 0},
		{"a PDU cut short after Connect", func(t *testing.T, p *tcpPeer) {
			p.initialize(t)
			p.connect(t)
			var sqe nvmeof.SQE
			sqe.BuildKeepAlive()
			_, _ = p.c.Write(capsule(&sqe, nil)[:40])
		}, 0},
		{"the R2T of a Connect's data never answered", func(t *testing.T, p *tcpPeer) {
			p.initialize(t)
			// The Connect data by R2T (a transport SGL), not in the capsule.
			var sqe nvmeof.SQE
			sqe.BuildConnect(0, 31, 0)
			sqe.SetCID(9)
			sqe.SetPSDT(1)
			sqe.SGL1().SetIdentifier(uint8(nvmeof.SGLTypeTransportDataBlock)<<4 | 0xA)
			sqe.SGL1().SetLength(nvmeof.ConnectDataSize)
			if _, err := p.c.Write(capsule(&sqe, nil)); err != nil {
				t.Fatal(err)
			}
			if h := p.readPDU(t); tcpwire.PDUType(h[0]) != tcpwire.TypeR2T {
				t.Fatalf("%s, want R2T", tcpwire.PDUType(h[0]))
			}
		}, 0},
		{"a bad HLEN", func(t *testing.T, p *tcpPeer) {
			p.initialize(t)
			var sqe nvmeof.SQE
			b := capsule(&sqe, nil)
			b[2] = 40
			_, _ = p.c.Write(b)
		}, tcpwire.FESInvalidHeaderField},
		{"PLEN beyond IOCCSZ", func(t *testing.T, p *tcpPeer) {
			p.initialize(t)
			p.connect(t)
			var sqe nvmeof.SQE
			sqe.BuildWrite(1, 0, 8)
			b := capsule(&sqe, nil)
			binary.LittleEndian.PutUint32(b[4:], 64<<20)
			b[3] = tcpwire.CapsuleCmdHLen
			_, _ = p.c.Write(b)
		}, tcpwire.FESDataLimitExceeded},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for i := range 5 {
				t.Run(strconv.Itoa(i), func(t *testing.T) {
					t.Parallel()
					start := time.Now()
					p := dialTCP(t, d)
					k.open(t, p)
					term := p.closed(t, k.name, start, bound)
					switch {
					case k.wantFES == 0:
					case term == nil:
						t.Errorf("closed without a C2HTermReq, want FES %v", k.wantFES)
					case term.FES() != k.wantFES:
						t.Errorf("C2HTermReq FES %v, want %v", term.FES(), k.wantFES)
					}
				})
			}
		})
	}
	d.healthy(t, "the NVMe/TCP peers")
}

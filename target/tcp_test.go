package target

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// tcpHost is a raw NVMe/TCP host written on the wire package: one queue.
type tcpHost struct {
	t    testing.TB
	c    net.Conn
	d    wire.Digests
	cid  uint16
	qid  uint16
	size int
	buf  []byte
	// sqFlowOff asks for SQ flow control disabled in connect; sqhd and
	// success are the last completion's SQHD and whether it came as a
	// C2HData's SUCCESS flag.
	sqFlowOff bool
	sqhd      uint16
	success   bool
}

func dialTCP(t testing.TB, addr string, d wire.Digests) *tcpHost {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(hang))
	if _, err := c.Write(wire.NewICReq(0, d, 0)[:]); err != nil {
		t.Fatal(err)
	}
	var b [wire.ICSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("ICResp: %v", err)
	}
	resp, err := wire.ParseICResp(b[:], d)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Digests() != d || resp.CPDA() != 0 || resp.PFV() != wire.PFV10 {
		t.Fatalf("ICResp digests %+v CPDA %d PFV %d", resp.Digests(), resp.CPDA(), resp.PFV())
	}
	return &tcpHost{t: t, c: c, d: d, buf: make([]byte, 4<<20)}
}

func (h *tcpHost) pdu(typ wire.PDUType, flags uint8, hdr, data []byte) []byte {
	ch := wire.NewHeader(typ, flags, h.d, uint32(len(data)), 0)
	b := make([]byte, wire.CommonHeaderSize, 128+len(data))
	ch.Put(b)
	b = append(b, hdr...)
	if h.d.Header {
		b = appendDigest(b, wire.HeaderDigest(b))
	}
	if len(data) > 0 {
		b = append(b, data...)
		if h.d.Data {
			b = appendDigest(b, wire.DataDigest(0, data))
		}
	}
	return b
}

func (h *tcpHost) recv() (wire.Header, []byte, []byte) {
	h.t.Helper()
	if _, err := io.ReadFull(h.c, h.buf[:wire.CommonHeaderSize]); err != nil {
		h.t.Fatalf("recv: %v", err)
	}
	hd, _ := wire.ParseHeader(h.buf)
	if hd.PLen > uint32(len(h.buf)) || hd.PLen < wire.CommonHeaderSize {
		h.t.Fatalf("PLEN %d", hd.PLen)
	}
	if _, err := io.ReadFull(h.c, h.buf[wire.CommonHeaderSize:hd.PLen]); err != nil {
		h.t.Fatalf("recv: %v", err)
	}
	pdu := h.buf[:hd.PLen]
	l, err := wire.Check(hd, false, h.d, 0)
	if err != nil {
		h.t.Fatalf("controller PDU: %v", err)
	}
	if l.HDGST {
		if err := wire.CheckHeaderDigest(pdu, hd); err != nil {
			h.t.Fatal(err)
		}
	}
	data := pdu[l.DataOff : l.DataOff+l.DataLen]
	if l.DDGST && wire.GetDigest(pdu[l.DataOff+l.DataLen:]) != wire.DataDigest(0, data) {
		h.t.Fatal("data digest")
	}
	return hd, pdu[:hd.HLen], data
}

// do runs a command: out is host-to-controller data (in the capsule if
// inCap, else through R2T/H2CData), in receives controller-to-host data.
func (h *tcpHost) do(sqe *nvmeof.SQE, out []byte, inCap bool, in []byte) (nvmeof.Status, uint64) {
	h.t.Helper()
	h.cid++
	cid := h.cid
	sqe.SetCID(cid)
	sqe.SetPSDT(1)
	n := max(len(out), len(in))
	switch {
	case n == 0:
		sqe.SGL1().SetNull()
	case inCap:
		sqe.SGL1().SetIdentifier(nvmeof.SGLIDInCapsule)
		sqe.SGL1().SetInCapsule(0, uint32(n))
	default:
		sqe.SGL1().SetIdentifier(uint8(nvmeof.SGLTypeTransportDataBlock)<<4 | 0xA)
		sqe.SGL1().SetAddress(0)
		sqe.SGL1().SetLength(uint32(n))
	}
	var capData []byte
	if inCap {
		capData = out
	}
	if _, err := h.c.Write(h.pdu(wire.TypeCapsuleCmd, 0, sqe[:], capData)); err != nil {
		h.t.Fatal(err)
	}
	for {
		hd, hdr, data := h.recv()
		switch hd.Type {
		case wire.TypeR2T:
			r2t := *(*wire.DataHeader)(hdr[:wire.DataHLen])
			if r2t.CID() != cid || int(r2t.Offset())+int(r2t.Length()) > len(out) {
				h.t.Fatalf("R2T CID %d %d+%d for %d bytes", r2t.CID(), r2t.Offset(), r2t.Length(), len(out))
			}
			const chunk = 32 << 10
			end := r2t.Offset() + r2t.Length()
			for off := r2t.Offset(); off < end; off += chunk {
				m := min(chunk, end-off)
				var flags uint8
				if off+m == end {
					flags = wire.FlagLastPDU
				}
				var dh [wire.DataHLen]byte
				wire.PutDataHeader(dh[:], wire.Header{}, cid, r2t.TTag(), off, m)
				if _, err := h.c.Write(h.pdu(wire.TypeH2CData, flags, dh[wire.CommonHeaderSize:], out[off:off+m])); err != nil {
					h.t.Fatal(err)
				}
			}
		case wire.TypeC2HData:
			dh := (*wire.DataHeader)(hdr[:wire.DataHLen])
			if dh.CID() != cid {
				h.t.Fatalf("C2HData for CID %d, want %d", dh.CID(), cid)
			}
			copy(in[dh.Offset():], data)
			if hd.Flags&wire.FlagSuccess != 0 {
				// TCP 1.0 §3.6.2.7: the C2HData stands for a successful
				// CQE; no CapsuleResp follows.
				h.success = true
				return nvmeof.StatusSuccess, 0
			}
		case wire.TypeCapsuleResp:
			cqe := wire.CapsuleCQE(hdr)
			if cqe.CID() != cid {
				h.t.Fatalf("CQE for CID %d, want %d", cqe.CID(), cid)
			}
			h.sqhd, h.success = cqe.SQHead(), false
			return cqe.Status(), cqe.Result64()
		default:
			h.t.Fatalf("unexpected %s", hd.Type)
		}
	}
}

func (h *tcpHost) connect(qid uint16, size int, subnqn string, cntlid uint16) uint16 {
	h.t.Helper()
	var d nvmeof.ConnectData
	d.SetHostID([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	d.SetCNTLID(cntlid)
	d.SetSubNQN(subnqn)
	d.SetHostNQN("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa")
	var sqe nvmeof.SQE
	sqe.BuildConnect(qid, uint16(size-1), testKATO).SetSQFlowControlDisable(h.sqFlowOff)
	st, res := h.do(&sqe, d[:], true, nil)
	if st != nvmeof.StatusSuccess {
		h.t.Fatalf("connect qid %d: %v", qid, st)
	}
	h.qid, h.size = qid, size
	return uint16(res)
}

func (h *tcpHost) enable() {
	h.t.Helper()
	var cc nvmeof.CC
	cc.SetIOSQES(6)
	cc.SetIOCQES(4)
	cc.SetEN(true)
	var sqe nvmeof.SQE
	sqe.BuildPropertySet(nvmeof.PropCC, uint64(cc))
	if st, _ := h.do(&sqe, nil, false, nil); st != nvmeof.StatusSuccess {
		h.t.Fatalf("set CC: %v", st)
	}
	deadline := time.Now().Add(hang)
	for {
		sqe = nvmeof.SQE{}
		sqe.BuildPropertyGet(nvmeof.PropCSTS)
		st, v := h.do(&sqe, nil, false, nil)
		if st != nvmeof.StatusSuccess {
			h.t.Fatalf("get CSTS: %v", st)
		}
		if nvmeof.CSTS(v).RDY() {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatal("CSTS.RDY never set")
		}
		time.Sleep(time.Millisecond)
	}
}

// tcpConfig is testConfig with a second port, NVMe/TCP, serving the
// same subsystem.
func tcpConfig(t testing.TB) *Config {
	cfg := testConfig(t, memNS(1, "16MiB"))
	cfg.Ports = append(cfg.Ports, PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: freePort(t), Transport: TransportTCP, Subsystems: []string{testSubNQN}})
	return cfg
}

// TestTCPDiscovery: the discovery log read over a TCP port lists the
// subsystem with TRTYPE tcp, the port's address and a TSAS of no
// security; an RDMA port's log still says rdma.
func TestTCPDiscovery(t *testing.T) {
	s := startServer(t, tcpConfig(t))
	h := dialTCP(t, portAddr(s, 2), wire.Digests{})
	h.connect(0, nvmeof.AdminQueueDepth, nvmeof.DiscoveryNQN, nvmeof.CNTLIDDynamic)
	h.enable()
	page := make([]byte, 3*1024)
	var sqe nvmeof.SQE
	sqe.BuildGetLogPage(nvmeof.LIDDiscovery, 0, 0, uint32(len(page)))
	if st, _ := h.do(&sqe, nil, false, page); st != nvmeof.StatusSuccess {
		t.Fatalf("get discovery log: %v", st)
	}
	var found bool
	for i := 1; i < 3; i++ {
		e, _ := nvmeof.ParseDiscoveryLogEntry(page[i*1024:])
		d := e.Decode()
		if d.TrType != nvmeof.TrTypeTCP || d.AdrFam != nvmeof.AdrFamIPv4 || d.PortID != 2 || d.RDMAQPType != 0 || d.RDMACMS != 0 {
			t.Errorf("entry %d: %+v, want TRTYPE tcp, IPv4, port 2, TSAS zero (SECTYPE none)", i, d)
		}
		if d.SubNQN == testSubNQN {
			found = true
			if _, port, _ := net.SplitHostPort(portAddr(s, 2)); d.TrSvcID != port || d.TrAddr != "127.0.0.1" {
				t.Errorf("entry %+v: want 127.0.0.1:%s", d, port)
			}
		}
	}
	if !found {
		t.Fatal("the subsystem is not in the TCP port's discovery log")
	}
}

// TestTCPIO: over the TCP port of a subsystem also served on RDMA, a host
// connects an admin and an I/O queue, identifies the controller, writes in
// the capsule and through R2T, and reads back, with and without digests.
func TestTCPIO(t *testing.T) {
	s := startServer(t, tcpConfig(t))
	for _, d := range []wire.Digests{{}, {Header: true, Data: true}} {
		t.Run(map[bool]string{false: "no-digests", true: "digests"}[d.Header], func(t *testing.T) {
			adm := dialTCP(t, portAddr(s, 2), d)
			cntlid := adm.connect(0, nvmeof.AdminQueueDepth, testSubNQN, nvmeof.CNTLIDDynamic)
			adm.enable()
			id := make([]byte, nvmeof.IdentifyDataSize)
			var sqe nvmeof.SQE
			sqe.BuildIdentify(nvmeof.CNSController, 0, 0, 0)
			if st, _ := adm.do(&sqe, nil, false, id); st != nvmeof.StatusSuccess {
				t.Fatalf("identify: %v", st)
			}
			ic := (*nvmeof.IdentifyController)(id)
			if ic.SUBNQN() != testSubNQN || ic.IOCCSZ() != (64+DefaultInlineDataSize)/16 {
				t.Fatalf("identify: SUBNQN %q IOCCSZ %d", ic.SUBNQN(), ic.IOCCSZ())
			}
			io := dialTCP(t, portAddr(s, 2), d)
			io.connect(1, 32, testSubNQN, cntlid)
			small := pattern(4096, 3)
			sqe = nvmeof.SQE{}
			sqe.BuildWrite(1, 0, 8)
			if st, _ := io.do(&sqe, small, true, nil); st != nvmeof.StatusSuccess {
				t.Fatalf("in-capsule write: %v", st)
			}
			big := pattern(256<<10, 4)
			sqe = nvmeof.SQE{}
			sqe.BuildWrite(1, 8, uint32(len(big)/512))
			if st, _ := io.do(&sqe, big, false, nil); st != nvmeof.StatusSuccess {
				t.Fatalf("R2T write: %v", st)
			}
			got := make([]byte, len(small)+len(big))
			sqe = nvmeof.SQE{}
			sqe.BuildRead(1, 0, uint32(len(got)/512))
			if st, _ := io.do(&sqe, nil, false, got); st != nvmeof.StatusSuccess {
				t.Fatalf("read: %v", st)
			}
			if !bytes.Equal(got[:4096], small) || !bytes.Equal(got[4096:], big) {
				t.Fatal("read back differs from what was written")
			}
			// The same data through the RDMA port of the subsystem.
			rh := mustConnect(t, portAddr(s, 1), testSubNQN)
			defer rh.close()
			rh.setup(1)
			rbuf := make([]byte, len(got))
			if err := do(t, rh.io[0], rw(false, 1, 0, rbuf, 512)); err != nil {
				t.Fatalf("RDMA read: %v", err)
			}
			if !bytes.Equal(rbuf, got) {
				t.Fatal("the RDMA path reads other data than the TCP path wrote")
			}
		})
	}
}

func appendDigest(b []byte, v uint32) []byte {
	var d [wire.DigestSize]byte
	wire.PutDigest(d[:], v)
	return append(b, d[:]...)
}

// TestTCPTransportConfig: ports[].transport is rdma (the default) or tcp.
func TestTCPTransportConfig(t *testing.T) {
	cfg := tcpConfig(t)
	cfg.Ports[0].Transport = ""
	cfg.ApplyDefaults()
	if cfg.Ports[0].Transport != TransportRDMA {
		t.Fatalf("default transport %q, want rdma", cfg.Ports[0].Transport)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("rdma and tcp ports of one subsystem: %v", err)
	}
	cfg.Ports[1].Transport = "udp"
	if err := cfg.Validate(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("ports[1].transport")) {
		t.Fatalf("transport udp: %v, want an error naming ports[1].transport", err)
	}
}

// TestTCPNvmetcli: a TCP port exports as trtype tcp and imports back as a
// TCP port.
func TestTCPNvmetcli(t *testing.T) {
	cfg := tcpConfig(t)
	cfg.Subsystems[0].Namespaces = []NamespaceConfig{{NSID: 1, Backend: BackendConfig{Kind: "file", Path: "/srv/ns1.img"}}}
	cfg.ApplyDefaults()
	nc, err := ExportNvmetcli(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := nc.Ports[1].Addr["trtype"]; got != TransportTCP {
		t.Fatalf("exported trtype %v, want tcp", got)
	}
	if got := nc.Ports[0].Addr["trtype"]; got != TransportRDMA {
		t.Fatalf("exported trtype %v, want rdma", got)
	}
	data, err := json.Marshal(nc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ImportNvmetcli(data, nil)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if !back.Ports[1].IsTCP() || back.Ports[0].IsTCP() {
		t.Fatalf("imported transports %q %q, want rdma tcp", back.Ports[0].Transport, back.Ports[1].Transport)
	}
}

// TestTCPIOAllocations: an NVMe/TCP I/O command (read, in-capsule write,
// write through R2T; with and without digests) allocates nothing in steady
// state, target and raw host together.
func TestTCPIOAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: it measures allocations over thousands of commands")
	}
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, kind := range []string{"null", "memory"} {
		for _, d := range []wire.Digests{{}, {Header: true, Data: true}} {
			t.Run(fmt.Sprintf("%s/digests=%v", kind, d.Header), func(t *testing.T) {
				cfg := tcpConfig(t)
				cfg.Subsystems[0].Namespaces[0].Backend.Kind = kind
				c := cfg.Clone()
				c.ApplyDefaults()
				s := newServer(c, zap.NewNop())
				if err := s.start(context.Background()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.shutdown(context.Background()) })
				adm := dialTCP(t, portAddr(s, 2), d)
				cntlid := adm.connect(0, nvmeof.AdminQueueDepth, testSubNQN, nvmeof.CNTLIDDynamic)
				adm.enable()
				io := dialTCP(t, portAddr(s, 2), d)
				io.connect(1, 32, testSubNQN, cntlid)
				for _, tc := range []struct {
					name  string
					size  int
					write bool
					inCap bool
				}{{"read 4KiB", 4096, false, false}, {"write 4KiB in-capsule", 4096, true, true}, {"write 128KiB R2T", 128 << 10, true, false}, {"read 128KiB", 128 << 10, false, false}} {
					var sqe nvmeof.SQE
					if tc.write {
						sqe.BuildWrite(1, 0, uint32(tc.size/512))
					} else {
						sqe.BuildRead(1, 0, uint32(tc.size/512))
					}
					cmd := io.prepare(&sqe, tc.size, tc.inCap)
					data := make([]byte, tc.size)
					h2c := io.pdu(wire.TypeH2CData, wire.FlagLastPDU, make([]byte, wire.DataHLen-wire.CommonHeaderSize), data)
					once := func() { io.run(cmd, h2c, data) }
					for range 200 {
						once()
					}
					const n = 2000
					var before, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					for range n {
						once()
					}
					runtime.ReadMemStats(&after)
					per := float64(after.Mallocs-before.Mallocs) / n
					t.Logf("%s: %.3f allocations per command (both sides, all goroutines)", tc.name, per)
					if per > 0.05 {
						t.Errorf("%s: %.3f allocations per command", tc.name, per)
					}
				}
			})
		}
	}
}

// prepare builds the CapsuleCmd PDU of a command once (CID 1000).
func (h *tcpHost) prepare(sqe *nvmeof.SQE, n int, inCap bool) []byte {
	sqe.SetCID(1000)
	sqe.SetPSDT(1)
	if inCap {
		sqe.SGL1().SetIdentifier(nvmeof.SGLIDInCapsule)
		sqe.SGL1().SetInCapsule(0, uint32(n))
		return h.pdu(wire.TypeCapsuleCmd, 0, sqe[:], make([]byte, n))
	}
	sqe.SGL1().SetIdentifier(uint8(nvmeof.SGLTypeTransportDataBlock)<<4 | 0xA)
	sqe.SGL1().SetLength(uint32(n))
	return h.pdu(wire.TypeCapsuleCmd, 0, sqe[:], nil)
}

// run sends a prepared command and answers its R2T with the prepared
// H2CData PDU (its header fields patched in place), until the response.
func (h *tcpHost) run(cmd, h2c, data []byte) {
	if _, err := h.c.Write(cmd); err != nil {
		h.t.Fatal(err)
	}
	for {
		hd, hdr, in := h.recv()
		switch hd.Type {
		case wire.TypeR2T:
			r2t := (*wire.DataHeader)(hdr[:wire.DataHLen])
			hh, _ := wire.ParseHeader(h2c)
			wire.PutDataHeader(h2c, hh, r2t.CID(), r2t.TTag(), 0, uint32(len(data)))
			if h.d.Header {
				wire.PutDigest(h2c[wire.DataHLen:], wire.HeaderDigest(h2c[:wire.DataHLen]))
			}
			if _, err := h.c.Write(h2c); err != nil {
				h.t.Fatal(err)
			}
		case wire.TypeC2HData:
			copy(data, in)
		case wire.TypeCapsuleResp:
			if st := wire.CapsuleCQE(hdr).Status(); st != nvmeof.StatusSuccess {
				h.t.Fatalf("status %v", st)
			}
			return
		}
	}
}

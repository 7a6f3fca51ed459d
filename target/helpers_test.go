package target

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nvmetd/nvmetd/iwarp"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

const (
	testSubNQN  = "nqn.2024-01.io.nvmetd.test:sub1"
	testSubNQN2 = "nqn.2024-01.io.nvmetd.test:sub2"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
	otherHost   = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555"
)

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// testConfig is one port on loopback serving one subsystem that allows any
// host, with the given namespaces.
func testConfig(t testing.TB, ns ...NamespaceConfig) *Config {
	return &Config{
		Ports: []PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: freePort(t), Subsystems: []string{testSubNQN}}},
		Subsystems: []SubsystemConfig{{
			NQN: testSubNQN, AllowAnyHost: true, Namespaces: ns,
		}},
		// No test here is about the transport's timeouts: long ones, so
		// that a test connection that waits (a refused Connect tried
		// again, a host the test holds) never runs into them on a loaded
		// machine.
		Transport: TransportConfig{ConnectTimeout: testTransportTimeout, StallTimeout: testTransportTimeout, WriteTimeout: testTransportTimeout},
	}
}

// hang is how long a test waits for something the target does at once (a
// response, a teardown, a drain): a hang guard, generous so that a loaded
// machine never fails it, never a bound the target must meet.
const hang = time.Minute

// testTransportTimeout is connect_timeout, stall_timeout and write_timeout
// of testConfig.
const testTransportTimeout = 5 * time.Minute

// testKATO is the keep-alive timeout (ms) of the test hosts: they send no
// Keep Alive, so it is long, so that a test host idle on a loaded machine
// keeps its controller (TestKeepAliveExpiry tests the timer).
const testKATO = 120000

func memNS(nsid uint32, size string) NamespaceConfig {
	return NamespaceConfig{NSID: nsid, Backend: BackendConfig{Kind: "memory", Size: size}}
}

// testLogger logs to the test at Info and above (Debug with -v is noisy).
func testLogger(t testing.TB) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
}

// startServer starts a target on cfg and shuts it down when the test ends.
func startServer(t testing.TB, cfg *Config) *server {
	t.Helper()
	c := cfg.Clone()
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	s := newServer(c, testLogger(t))
	if err := s.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		if err := s.shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}

// portAddr is the address of the server's port id.
func portAddr(s *server, id uint16) string {
	s.regMu.RLock()
	defer s.regMu.RUnlock()
	return s.ports[id].cfg.ListenAddress()
}

// host is a test NVMe host: an admin queue and I/O queues of one
// controller, over the binding's host side.
type host struct {
	t      testing.TB
	addr   string
	nqn    string
	subnqn string
	hostID [16]byte
	admin  *rdma.HostQueue
	cntlid uint16
	io     []*rdma.HostQueue
	id     *nvmeof.IdentifyController
}

func do(t testing.TB, q *rdma.HostQueue, r *rdma.HostRequest) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	return q.Do(ctx, r)
}

func dial(t testing.TB, addr string, qid uint16, size int) (*rdma.HostQueue, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	return rdma.Dial(ctx, "tcp", addr, rdma.HostConfig{QID: qid, QueueSize: size, InlineDataSize: 4096})
}

// connectCmd runs Connect on q.
func connectCmd(t testing.TB, q *rdma.HostQueue, subnqn, hostnqn string, cntlid uint16, kato uint32) (uint32, error) {
	t.Helper()
	var d nvmeof.ConnectData
	d.SetHostID([16]byte{0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55})
	d.SetCNTLID(cntlid)
	d.SetSubNQN(subnqn)
	d.SetHostNQN(hostnqn)
	r := &rdma.HostRequest{Data: d[:], Write: true}
	r.SQE.BuildConnect(q.QID(), uint16(q.Size()-1), kato)
	err := do(t, q, r)
	return r.CQE.Result(), err
}

// connectHost opens the admin queue and connects (dynamic controller).
func connectHost(t testing.TB, addr, subnqn, hostnqn string, kato uint32) (*host, error) {
	t.Helper()
	q, err := dial(t, addr, 0, rdma.AdminQueueSize)
	if err != nil {
		return nil, err
	}
	res, err := connectCmd(t, q, subnqn, hostnqn, nvmeof.CNTLIDDynamic, kato)
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("connect: %w (result %#x)", err, res)
	}
	h := &host{t: t, addr: addr, nqn: hostnqn, subnqn: subnqn, admin: q, cntlid: uint16(res)}
	t.Cleanup(h.close)
	return h, nil
}

func mustConnect(t testing.TB, addr, subnqn string) *host {
	t.Helper()
	h, err := connectHost(t, addr, subnqn, testHostNQN, testKATO)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *host) close() {
	for _, q := range h.io {
		q.Close()
	}
	h.io = nil
	if h.admin != nil {
		h.admin.Close()
	}
}

// adminDo runs an admin command.
func (h *host) adminDo(r *rdma.HostRequest) error {
	h.t.Helper()
	return do(h.t, h.admin, r)
}

func (h *host) propGet(off uint32) (uint64, error) {
	r := &rdma.HostRequest{}
	r.SQE.BuildPropertyGet(off)
	err := h.adminDo(r)
	return r.CQE.Result64(), err
}

func (h *host) propSet(off uint32, v uint64) error {
	r := &rdma.HostRequest{}
	r.SQE.BuildPropertySet(off, v)
	return h.adminDo(r)
}

// enable runs the Linux host's nvme_enable_ctrl sequence.
func (h *host) enable() {
	t := h.t
	t.Helper()
	capv, err := h.propGet(nvmeof.PropCAP)
	if err != nil {
		t.Fatalf("get CAP: %v", err)
	}
	if nvmeof.CAP(capv).MPSMIN() != 0 {
		t.Fatalf("CAP.MPSMIN %d", nvmeof.CAP(capv).MPSMIN())
	}
	var cc nvmeof.CC
	cc.SetIOSQES(6)
	cc.SetIOCQES(4)
	if err := h.propSet(nvmeof.PropCC, uint64(cc)); err != nil {
		t.Fatalf("set CC: %v", err)
	}
	if _, err := h.propGet(nvmeof.PropCAP); err != nil {
		t.Fatal(err)
	}
	cc.SetEN(true)
	if err := h.propSet(nvmeof.PropCC, uint64(cc)); err != nil {
		t.Fatalf("set CC.EN: %v", err)
	}
	deadline := time.Now().Add(hang)
	for {
		v, err := h.propGet(nvmeof.PropCSTS)
		if err != nil {
			t.Fatal(err)
		}
		if nvmeof.CSTS(v).RDY() {
			break
		}
		if nvmeof.CSTS(v).CFS() || time.Now().After(deadline) {
			t.Fatalf("CSTS %v", nvmeof.CSTS(v))
		}
		time.Sleep(time.Millisecond)
	}
	if v, err := h.propGet(nvmeof.PropVS); err != nil || nvmeof.VS(v) != versionReported {
		t.Fatalf("VS %v %v", nvmeof.VS(v), err)
	}
}

// identify runs Identify with a 4096-byte buffer.
func (h *host) identify(cns uint8, nsid uint32, csi uint8) ([]byte, error) {
	r := &rdma.HostRequest{Data: make([]byte, nvmeof.IdentifyDataSize)}
	r.SQE.BuildIdentify(cns, nsid, 0, csi)
	err := h.adminDo(r)
	return r.Data, err
}

func (h *host) identifyController() *nvmeof.IdentifyController {
	h.t.Helper()
	b, err := h.identify(nvmeof.CNSController, 0, 0)
	if err != nil {
		h.t.Fatalf("identify controller: %v", err)
	}
	id, _ := nvmeof.ParseIdentifyController(b)
	h.id = id
	return id
}

func (h *host) setFeature(fid uint8, v uint32) (uint32, error) {
	r := &rdma.HostRequest{}
	r.SQE.BuildSetFeatures(fid, 0, v, false)
	err := h.adminDo(r)
	return r.CQE.Result(), err
}

func (h *host) getFeature(fid uint8) (uint32, error) {
	r := &rdma.HostRequest{}
	r.SQE.BuildGetFeatures(fid, 0, nvmeof.FeatSelCurrent)
	err := h.adminDo(r)
	return r.CQE.Result(), err
}

func (h *host) getLog(lid uint8, nsid uint32, lpo uint64, n int) ([]byte, error) {
	r := &rdma.HostRequest{Data: make([]byte, n)}
	r.SQE.BuildGetLogPage(lid, nsid, lpo, uint32(n))
	err := h.adminDo(r)
	return r.Data, err
}

// connectIO opens I/O queue qid.
func (h *host) connectIO(qid uint16, size int) (*rdma.HostQueue, error) {
	h.t.Helper()
	q, err := dial(h.t, h.addr, qid, size)
	if err != nil {
		return nil, err
	}
	res, err := connectCmd(h.t, q, h.subnqn, h.nqn, h.cntlid, 0)
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("connect qid %d: %w (result %#x)", qid, err, res)
	}
	if uint16(res) != h.cntlid {
		q.Close()
		return nil, fmt.Errorf("connect qid %d: CNTLID %d, want %d", qid, res, h.cntlid)
	}
	h.io = append(h.io, q)
	return q, nil
}

// setup runs what a Linux host does after the admin Connect: enable,
// Identify Controller with the host's hard checks, Number of Queues, then
// n I/O queues.
func (h *host) setup(n int) {
	t := h.t
	t.Helper()
	h.enable()
	id := h.identifyController()
	if err := id.CheckFabrics(h.cntlid, false); err != nil {
		t.Fatalf("Identify Controller fails the Linux host's checks: %v", err)
	}
	if n == 0 {
		return
	}
	res, err := h.setFeature(nvmeof.FeatNumQueues, nvmeof.EncodeNumQueues(n, n))
	if err != nil {
		t.Fatalf("set number of queues: %v", err)
	}
	nsq, ncq := nvmeof.DecodeNumQueues(res)
	if min(nsq, ncq) < n {
		t.Fatalf("granted %d/%d queues, want %d", nsq, ncq, n)
	}
	for qid := 1; qid <= n; qid++ {
		if _, err := h.connectIO(uint16(qid), 32); err != nil {
			t.Fatal(err)
		}
	}
}

func rw(write bool, nsid uint32, lba uint64, data []byte, bs int) *rdma.HostRequest {
	r := &rdma.HostRequest{Data: data, Write: write}
	if write {
		r.SQE.BuildWrite(nsid, lba, uint32(len(data)/bs))
	} else {
		r.SQE.BuildRead(nsid, lba, uint32(len(data)/bs))
	}
	return r
}

func pattern(n int, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>9)
	}
	return b
}

// wantStatus checks an NVMe status, ignoring the More bit nvmet-style
// error logging sets.
func wantStatus(t testing.TB, what string, err error, want nvmeof.Status) {
	t.Helper()
	var got nvmeof.Status
	if err != nil && !errors.As(err, &got) {
		t.Fatalf("%s: %v, want NVMe status %v", what, err, want)
	}
	if got&^nvmeof.StatusMore != want {
		t.Fatalf("%s: status %v, want %v", what, got, want)
	}
}

// waitFor polls cond.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// raw is a raw NVMe/RDMA host queue on the iwarp verbs, for capsules the
// binding's host side would never send.
type raw struct {
	t    testing.TB
	qp   *iwarp.QP
	pd   *iwarp.PD
	cq   *iwarp.CQ
	recv [][]byte
	mu   sync.Mutex
}

func dialRaw(t testing.TB, addr string, qid uint16, size int) *raw {
	t.Helper()
	r := &raw{t: t, pd: iwarp.NewPD(), cq: iwarp.NewCQ(4 * size)}
	var err error
	r.qp, err = iwarp.NewQP(iwarp.QPAttr{PD: r.pd, SendCQ: r.cq, RecvCQ: r.cq, SendDepth: 2 * size, RecvDepth: size, IRD: 16, ORD: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < size; i++ {
		b := make([]byte, nvmeof.CQESize)
		r.recv = append(r.recv, b)
		if err := r.qp.PostRecv(&iwarp.RecvWR{ID: uint64(i), Buf: b}); err != nil {
			t.Fatal(err)
		}
	}
	cm := rdma.CMRequest{QID: qid, HRQSize: uint16(size), HSQSize: uint16(size - 1)}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	if err := iwarp.Dial(ctx, "tcp", addr, r.qp, cm.Append(nil), &iwarp.Config{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.qp.Disconnect()
		<-r.qp.Done()
	})
	return r
}

// send posts a capsule (SQE plus optional in-capsule bytes) and returns the
// response, or an error if the connection ended first.
func (r *raw) send(capsule ...[]byte) (nvmeof.CQE, error) {
	r.t.Helper()
	if err := r.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRSend, Local: capsule}); err != nil {
		return nvmeof.CQE{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	var wc [1]iwarp.WC
	for {
		n, err := r.cq.PollWait(ctx, wc[:])
		if err != nil {
			return nvmeof.CQE{}, err
		}
		if n == 0 || wc[0].Opcode != iwarp.WCRecv {
			continue
		}
		if wc[0].Status != iwarp.WCSuccess {
			return nvmeof.CQE{}, fmt.Errorf("receive: %v", wc[0].Status)
		}
		var cqe nvmeof.CQE
		copy(cqe[:], r.recv[wc[0].ID])
		_ = r.qp.PostRecv(&iwarp.RecvWR{ID: wc[0].ID, Buf: r.recv[wc[0].ID]})
		return cqe, nil
	}
}

// register makes buf readable and writable by the target.
func (r *raw) register(buf []byte) (stag uint32, addr uint64) {
	mr, err := r.pd.RegisterMemoryAt(buf, 0x10000, iwarp.AccessLocalWrite|iwarp.AccessRemoteRead|iwarp.AccessRemoteWrite)
	if err != nil {
		r.t.Fatal(err)
	}
	return mr.STag(), 0x10000
}

func itoa(n int) string { return strconv.Itoa(n) }

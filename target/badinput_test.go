package target

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/iwarp"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// connectSQE builds a Connect SQE whose data is in the capsule (I/O
// queues) or keyed at (stag, addr).
func connectSQE(qid, sqsize uint16, inCapsule bool, stag uint32, addr uint64) *nvmeof.SQE {
	sqe := new(nvmeof.SQE)
	sqe.BuildConnect(qid, sqsize, 0)
	if inCapsule {
		sqe.SGL1().SetInCapsule(0, nvmeof.ConnectDataSize)
	} else {
		sqe.SGL1().SetKeyed(addr, nvmeof.ConnectDataSize, stag, false)
	}
	return sqe
}

func connectDataFor(sub, host string, cntlid uint16) *nvmeof.ConnectData {
	var d nvmeof.ConnectData
	d.SetSubNQN(sub)
	d.SetHostNQN(host)
	d.SetCNTLID(cntlid)
	return &d
}

func wantCQE(t *testing.T, what string, cqe nvmeof.CQE, err error, want nvmeof.Status, dw0 uint32) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got := cqe.Status() &^ nvmeof.StatusMore; got != want || cqe.Result() != dw0 {
		t.Fatalf("%s: status %v DW0 %#x, want %v DW0 %#x", what, cqe.Status(), cqe.Result(), want, dw0)
	}
}

// TestBadConnect: every Connect nvmet refuses, refused with nvmet's status
// and IATTR/IPO.
func TestBadConnect(t *testing.T) {
	s := startServer(t, testConfig(t, memNS(1, "1MiB")))
	addr := portAddr(s, 1)
	good := connectDataFor(testSubNQN, testHostNQN, nvmeof.CNTLIDDynamic)

	t.Run("admin", func(t *testing.T) {
		r := dialRaw(t, addr, 0, 32)
		buf := make([]byte, nvmeof.ConnectDataSize)
		stag, ta := r.register(buf)
		send := func(sqe *nvmeof.SQE, d *nvmeof.ConnectData) (nvmeof.CQE, error) {
			copy(buf, d[:])
			return r.send(sqe[:])
		}
		// Nothing but Connect on an unconnected queue.
		var id nvmeof.SQE
		id.BuildIdentify(nvmeof.CNSController, 0, 0, 0)
		id.SGL1().SetKeyed(ta, 4096, stag, false)
		cqe, err := r.send(id[:])
		wantCQE(t, "identify before connect", cqe, err, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR, 0)
		var pg nvmeof.SQE
		pg.BuildPropertyGet(nvmeof.PropCAP)
		pg.SGL1().SetNull()
		cqe, err = r.send(pg[:])
		wantCQE(t, "property get before connect", cqe, err, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR, 0)

		sqe := connectSQE(0, 31, false, stag, ta)
		sqe.ConnectCmd().SetRECFMT(1)
		cqe, err = send(sqe, good)
		wantCQE(t, "RECFMT 1", cqe, err, nvmeof.StatusConnectIncompatibleFormat|nvmeof.StatusDNR, 0)

		cqe, err = send(connectSQE(0, 31, false, stag, ta), connectDataFor(testSubNQN, testHostNQN, 5))
		wantCQE(t, "admin connect with CNTLID 5", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, 0x10010)

		cqe, err = send(connectSQE(0, 0, false, stag, ta), good)
		wantCQE(t, "SQSIZE 0", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, 0x2C)
		cqe, err = send(connectSQE(0, 40, false, stag, ta), good)
		wantCQE(t, "SQSIZE beyond the CM queue", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, 0x2C)
		cqe, err = send(connectSQE(1, 31, false, stag, ta), good)
		wantCQE(t, "QID 1 on the admin queue", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, 0x2A)

		bad := connectDataFor(testSubNQN, testHostNQN, nvmeof.CNTLIDDynamic)
		for i := 512; i < 768; i++ {
			bad[i] = 'a' // HOSTNQN without a terminator
		}
		cqe, err = send(connectSQE(0, 31, false, stag, ta), bad)
		wantCQE(t, "unterminated HOSTNQN", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, 0x10200)

		short := connectSQE(0, 31, false, stag, ta)
		short.SGL1().SetLength(512)
		cqe, err = r.send(short[:])
		wantCQE(t, "512 bytes of Connect data", cqe, err, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR, 0)

		// After those failures the queue still connects, once.
		cqe, err = send(connectSQE(0, 31, false, stag, ta), good)
		if err != nil || cqe.Status() != nvmeof.StatusSuccess {
			t.Fatalf("good connect: %v %v", cqe.Status(), err)
		}
		cntlid := uint16(cqe.Result())
		cqe, err = send(connectSQE(0, 31, false, stag, ta), good)
		wantCQE(t, "connect on a connected queue", cqe, err, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR, 0)

		// Commands on the connected, not enabled, admin queue.
		var aer nvmeof.SQE
		aer.BuildAER()
		aer.SGL1().SetNull()
		cqe, err = r.send(aer[:])
		wantCQE(t, "AER before enable", cqe, err, nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR, 0)
		var fused nvmeof.SQE
		fused.BuildKeepAlive()
		fused.SetFUSE(nvmeof.FlagFuseFirst)
		fused.SGL1().SetNull()
		cqe, err = r.send(fused[:])
		wantCQE(t, "fused command", cqe, err, nvmeof.StatusInvalidField|nvmeof.StatusDNR, 0)
		var prp nvmeof.SQE
		prp.BuildKeepAlive()
		prp.SetPSDT(0)
		prp.SGL1().SetNull()
		cqe, err = r.send(prp[:])
		wantCQE(t, "PRP command", cqe, err, nvmeof.StatusInvalidField|nvmeof.StatusDNR, 0)
		var auth nvmeof.SQE
		auth.BuildKeepAlive()
		auth.SetOpcode(nvmeof.OpFabrics)
		auth.SetFCType(nvmeof.FCTypeAuthSend)
		auth.SGL1().SetNull()
		cqe, err = r.send(auth[:])
		// SECP 0: refused before any data moves (nvmet_execute_auth_send).
		wantCQE(t, "authentication send", cqe, err, nvmeof.StatusInvalidField|nvmeof.StatusDNR, 0)

		// I/O queues of that controller: wrong CNTLID, wrong host, QID
		// beyond the limit, twice the same QID.
		iq := dialRaw(t, addr, 1, 16)
		cqe, err = iq.send(connectSQE(1, 15, true, 0, 0)[:], connectDataFor(testSubNQN, testHostNQN, cntlid+1)[:])
		wantCQE(t, "I/O connect to an unknown CNTLID", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, 0x10010)
		cqe, err = iq.send(connectSQE(1, 15, true, 0, 0)[:], connectDataFor(testSubNQN, otherHost, cntlid)[:])
		wantCQE(t, "I/O connect from another host", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, 0x10010)
		cqe, err = iq.send(connectSQE(1, 15, true, 0, 0)[:], connectDataFor("nqn.2024-01.io.nvmetd.test:x", testHostNQN, cntlid)[:])
		wantCQE(t, "I/O connect to an unknown subsystem", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, 0x10100)
		cqe, err = iq.send(connectSQE(1, 15, true, 0, 0)[:], connectDataFor(testSubNQN, testHostNQN, cntlid)[:])
		wantCQE(t, "I/O connect", cqe, err, nvmeof.StatusSuccess, uint32(cntlid))
		dup := dialRaw(t, addr, 1, 16)
		cqe, err = dup.send(connectSQE(1, 15, true, 0, 0)[:], connectDataFor(testSubNQN, testHostNQN, cntlid)[:])
		wantCQE(t, "second connect of QID 1", cqe, err, nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR, uint32(cntlid))
		big := dialRaw(t, addr, 2000, 16)
		cqe, err = big.send(connectSQE(2000, 15, true, 0, 0)[:], connectDataFor(testSubNQN, testHostNQN, cntlid)[:])
		wantCQE(t, "QID beyond the queues", cqe, err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR, 0x2A)
		// Commands on a connected I/O queue of a disabled controller.
		var rd nvmeof.SQE
		rd.BuildRead(1, 0, 1)
		rd.SGL1().SetKeyed(ta, 512, stag, false)
		cqe, err = iq.send(rd[:])
		wantCQE(t, "read before enable", cqe, err, nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR, 0)
		var pg2 nvmeof.SQE
		pg2.BuildPropertyGet(nvmeof.PropCAP)
		pg2.SGL1().SetNull()
		cqe, err = iq.send(pg2[:])
		wantCQE(t, "property get on an I/O queue", cqe, err, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR, 0)
	})

	t.Run("io queue before admin", func(t *testing.T) {
		q, err := dial(t, addr, 1, 16)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		res, err := connectCmd(t, q, testSubNQN, testHostNQN, 1, 0)
		wantStatus(t, "I/O connect without a controller", err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR)
		if res != 0x10010 {
			t.Fatalf("DW0 %#x", res)
		}
		// The same queue can still be used for a good Connect later; and a
		// read on it is refused while it is unconnected.
		r := rw(false, 1, 0, make([]byte, 512), 512)
		wantStatus(t, "read on an unconnected queue", do(t, q, r), nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR)
	})

	t.Run("CM", func(t *testing.T) {
		// Queue sizes the CM request asks for beyond the port's limits.
		ctx := t.Context()
		for _, tc := range []struct{ qid, size int }{{0, 33}, {1, 129}} {
			_, err := rdma.Dial(ctx, "tcp", addr, rdma.HostConfig{QID: uint16(tc.qid), QueueSize: tc.size})
			if err == nil {
				t.Fatalf("queue %d of %d accepted", tc.qid, tc.size)
			}
		}
	})
}

// TestBadCommands: malformed capsules and commands on a working controller.
func TestBadCommands(t *testing.T) {
	s := startServer(t, testConfig(t, memNS(1, "1MiB")))
	addr := portAddr(s, 1)
	h := mustConnect(t, addr, testSubNQN)
	h.setup(0)
	if _, err := h.setFeature(nvmeof.FeatNumQueues, nvmeof.EncodeNumQueues(2, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.connectIO(1, 32); err != nil {
		t.Fatal(err)
	}

	// A raw I/O queue of the same controller, for capsules the binding's
	// host side never makes.
	r := dialRaw(t, addr, 2, 16)
	if _, err := h.setFeature(nvmeof.FeatNumQueues, 0); err == nil {
		t.Fatal("number of queues changed with queues connected")
	}
	cqe, err := r.send(connectSQE(2, 15, true, 0, 0)[:], connectDataFor(testSubNQN, testHostNQN, h.cntlid)[:])
	wantCQE(t, "raw I/O connect", cqe, err, nvmeof.StatusSuccess, uint32(h.cntlid))
	buf := make([]byte, 2<<20)
	stag, ta := r.register(buf)
	for _, tc := range []struct {
		name string
		sgl  func(*nvmeof.SGL)
		op   uint8
		want nvmeof.Status
	}{
		{"SGL segment descriptor", func(s *nvmeof.SGL) { s.SetIdentifier(0x20); s.SetLength(512) }, nvmeof.NVMRead, nvmeof.StatusSGLInvalidType | nvmeof.StatusDNR},
		{"SGL bit bucket", func(s *nvmeof.SGL) { s.SetIdentifier(0x10); s.SetLength(512) }, nvmeof.NVMRead, nvmeof.StatusSGLInvalidType | nvmeof.StatusDNR},
		{"keyed SGL, bad subtype", func(s *nvmeof.SGL) { s.SetKeyed(ta, 512, stag, false); s.SetIdentifier(0x42) }, nvmeof.NVMRead, nvmeof.StatusInvalidField | nvmeof.StatusDNR},
		{"in-capsule data for a read", func(s *nvmeof.SGL) { s.SetInCapsule(0, 512) }, nvmeof.NVMRead, nvmeof.StatusInvalidField | nvmeof.StatusDNR},
		{"in-capsule data beyond the capsule", func(s *nvmeof.SGL) { s.SetInCapsule(0, 8192) }, nvmeof.NVMWrite, nvmeof.StatusSGLInvalidOffset | nvmeof.StatusDNR},
		{"transfer beyond MDTS", func(s *nvmeof.SGL) { s.SetKeyed(ta, 2<<20, stag, false) }, nvmeof.NVMRead, nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR},
		{"null SGL for a read", func(s *nvmeof.SGL) { s.SetNull() }, nvmeof.NVMRead, nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sqe nvmeof.SQE
			sqe.BuildRead(1, 0, 1)
			sqe.SetOpcode(tc.op)
			tc.sgl(sqe.SGL1())
			cqe, err := r.send(sqe[:])
			wantCQE(t, tc.name, cqe, err, tc.want, 0)
		})
	}
	// Keyed reads and writes from the raw queue work (Send with Invalidate
	// is not asked for: plain Send).
	var wr nvmeof.SQE
	wr.BuildWrite(1, 0, 8)
	copy(buf, pattern(4096, 1))
	wr.SGL1().SetKeyed(ta, 4096, stag, false)
	cqe, err = r.send(wr[:])
	wantCQE(t, "keyed write", cqe, err, nvmeof.StatusSuccess, 0)

	// Admin commands with bad lengths or fields.
	id := &rdma.HostRequest{Data: make([]byte, 512)}
	id.SQE.BuildIdentify(nvmeof.CNSController, 0, 0, 0)
	wantStatus(t, "identify into 512 bytes", h.adminDo(id), nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
	lp := &rdma.HostRequest{Data: make([]byte, 512)}
	lp.SQE.BuildGetLogPage(nvmeof.LIDSMART, nvmeof.NSIDAll, 0, 1024)
	wantStatus(t, "log page length differs from NUMD", h.adminDo(lp), nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
	_, err = h.getLog(nvmeof.LIDSMART, nvmeof.NSIDAll, 6, 64)
	wantStatus(t, "unaligned LPO", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	_, err = h.getLog(nvmeof.LIDSMART, nvmeof.NSIDAll, 516, 4)
	wantStatus(t, "LPO past the SMART log", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	b, err := h.getLog(nvmeof.LIDSMART, nvmeof.NSIDAll, 512, 8)
	if err != nil || b[0] != 0 {
		t.Fatalf("read at the end of the SMART log: %v", err)
	}
	_, err = h.getLog(nvmeof.LIDDiscovery, 0, 0, 1024)
	wantStatus(t, "discovery log on an I/O controller", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	_, err = h.getLog(nvmeof.LIDSMART, 7, 0, 512)
	wantStatus(t, "SMART of a missing namespace", err, nvmeof.StatusInvalidNamespace|nvmeof.StatusDNR)
	eff := &rdma.HostRequest{Data: make([]byte, 4096)}
	eff.SQE.BuildGetLogPage(nvmeof.LIDCommandEffects, nvmeof.NSIDAll, 0, 4096).SetCSI(nvmeof.CSIZNS)
	wantStatus(t, "effects of another command set", h.adminDo(eff), nvmeof.StatusInvalidLogPage)
	for _, op := range []uint8{nvmeof.AdminCreateSQ, nvmeof.AdminDeleteSQ, nvmeof.AdminFormatNVM, nvmeof.AdminNSManagement, 0xC0} {
		x := &rdma.HostRequest{}
		x.SQE.BuildKeepAlive()
		x.SQE.SetOpcode(op)
		wantStatus(t, nvmeof.OpcodeName(0, &x.SQE), h.adminDo(x), nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR)
	}
	ka := &rdma.HostRequest{Data: make([]byte, 512)}
	ka.SQE.BuildKeepAlive()
	wantStatus(t, "keep alive with data", h.adminDo(ka), nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
	// The host identifier comes back as given in Connect.
	hid := &rdma.HostRequest{Data: make([]byte, 16)}
	hid.SQE.BuildGetFeatures(nvmeof.FeatHostIdentifier, 0, 0).SetValue(nvmeof.HostIDExtended)
	if err := h.adminDo(hid); err != nil || hid.Data[0] != 0x11 || hid.Data[15] != 0x55 {
		t.Fatalf("host identifier %x %v", hid.Data, err)
	}

	// Four AERs are held, the fifth is refused.
	for range 4 {
		h.aer()
	}
	x := &rdma.HostRequest{}
	x.SQE.BuildAER()
	wantStatus(t, "fifth AER", h.adminDo(x), nvmeof.StatusAsyncEventLimitExceeded|nvmeof.StatusDNR)

	// A capsule shorter than an SQE ends the connection cleanly; the
	// controller and its other queues are not affected.
	if err := r.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRSend, Local: [][]byte{make([]byte, 32)}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.qp.Done():
	case <-time.After(hang):
		t.Fatal("short capsule did not end the connection")
	}
	h.alive("after a short capsule on another queue")
	if err := do(t, h.io[0], rw(false, 1, 0, make([]byte, 512), 512)); err != nil {
		t.Fatal(err)
	}
}

// TestRandomCommands sends thousands of random commands (random opcodes,
// NSIDs and dwords, with no data, keyed data or in-capsule data) on the
// admin queue and an I/O queue of a live controller: every one must be
// answered, the target must not crash, and good I/O must work afterwards.
func TestRandomCommands(t *testing.T) {
	s := startServer(t, testConfig(t, memNS(1, "1MiB"), NamespaceConfig{NSID: 2, Backend: BackendConfig{Kind: "null", Size: "1MiB"}}))
	addr := portAddr(s, 1)
	h := mustConnect(t, addr, testSubNQN)
	h.setup(1)

	admin := dialRaw(t, addr, 0, 32)
	buf := make([]byte, 1<<20)
	stag, ta := admin.register(buf)
	d := connectDataFor(testSubNQN, testHostNQN, nvmeof.CNTLIDDynamic)
	copy(buf, d[:])
	cqe, err := admin.send(connectSQE(0, 31, false, stag, ta)[:])
	if err != nil || cqe.Status() != nvmeof.StatusSuccess {
		t.Fatalf("connect: %v %v", cqe.Status(), err)
	}
	cntlid := uint16(cqe.Result())
	var cc nvmeof.SQE
	cc.BuildPropertySet(nvmeof.PropCC, 0x460001)
	cc.SGL1().SetNull()
	if _, err := admin.send(cc[:]); err != nil {
		t.Fatal(err)
	}
	io := dialRaw(t, addr, 1, 32)
	if cqe, err := io.send(connectSQE(1, 31, true, 0, 0)[:], connectDataFor(testSubNQN, testHostNQN, cntlid)[:]); err != nil || cqe.Status() != nvmeof.StatusSuccess {
		t.Fatalf("I/O connect: %v %v", cqe.Status(), err)
	}
	iostag, ioaddr := io.register(make([]byte, 1<<20))

	rng := rand.New(rand.NewPCG(7, 7))
	opsAdmin := []uint8{0x00, 0x01, 0x02, 0x04, 0x05, 0x06, 0x08, 0x09, 0x0A, 0x0D, 0x10, 0x18, 0x7F, 0x80, 0x81, 0xC1, 0xFF}
	opsIO := []uint8{0x00, 0x01, 0x02, 0x04, 0x05, 0x08, 0x09, 0x0C, 0x0D, 0x7F, 0x99, 0xFF}
	for i := 0; i < 3000; i++ {
		r, ops, key, base := admin, opsAdmin, stag, ta
		if i%2 == 1 {
			r, ops, key, base = io, opsIO, iostag, ioaddr
		}
		var sqe nvmeof.SQE
		sqe.SetOpcode(ops[rng.IntN(len(ops))])
		sqe.SetPSDT(1)
		if rng.IntN(20) == 0 {
			sqe.SetFlags(uint8(rng.Uint32()))
		}
		for dw := 1; dw < 16; dw++ {
			if dw >= 6 && dw <= 9 {
				continue // DPTR below
			}
			if rng.IntN(3) == 0 {
				sqe.SetCDW(dw, rng.Uint32())
			}
		}
		switch rng.IntN(4) {
		case 0:
			sqe.SetNSID(uint32(rng.IntN(4)))
			if rng.IntN(4) == 0 {
				sqe.SetNSID(nvmeof.NSIDAll)
			}
		}
		if sqe.Opcode() == nvmeof.OpFabrics {
			sqe.SetFCType([]uint8{0, 1, 4, 5, 6, 8, 0x7F}[rng.IntN(7)])
			if sqe.FCType() == nvmeof.FCTypePropertySet {
				sqe.PropertySetCmd().SetOffset(nvmeof.PropCC)
				sqe.PropertySetCmd().SetValue(0x460001) // keep the controller enabled
			}
		}
		if sqe.Opcode() == nvmeof.AdminAsyncEvent && r == admin {
			continue // held, never answered
		}
		if sqe.Opcode() == nvmeof.AdminSetFeatures && r == admin && sqe.FeaturesCmd().FID() == nvmeof.FeatKeepAliveTimer {
			continue // could end the controller while we are silent
		}
		var capsule [][]byte
		capsule = append(capsule, sqe[:])
		switch rng.IntN(4) {
		case 0:
			sqe.SGL1().SetNull()
		case 1:
			sqe.SGL1().SetKeyed(base, uint32(512*(1+rng.IntN(16))), key, false) // (an invalidating response would end our MR)
		case 2:
			sqe.SGL1().SetKeyed(base, 4096, key, false)
		case 3:
			if r == io {
				n := 512 * (1 + rng.IntN(8))
				sqe.SGL1().SetInCapsule(0, uint32(n))
				capsule = append(capsule, make([]byte, n))
			} else {
				sqe.SGL1().SetNull()
			}
		}
		cqe, err := r.send(capsule...)
		if err != nil {
			t.Fatalf("command %d (%s): %v", i, nvmeof.OpcodeName(0, &sqe), err)
		}
		if cqe.CID() != sqe.CID() {
			t.Fatalf("command %d: CID %#x, want %#x", i, cqe.CID(), sqe.CID())
		}
	}
	// The controller of the well-behaved host is unaffected.
	h.alive("after random commands on another controller")
	if err := do(t, h.io[0], rw(true, 1, 8, pattern(4096, 3), 512)); err != nil {
		t.Fatal(err)
	}
}

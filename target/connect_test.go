package target

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// TestLinuxConnectSequence runs what `nvme connect -t rdma` makes the Linux
// host do (protocol.md §11.2) and checks every answer the host depends on.
func TestLinuxConnectSequence(t *testing.T) {
	cfg := testConfig(t, memNS(1, "16MiB"), memNS(3, "8MiB"))
	cfg.Subsystems[0].Serial = "SERIAL-1"
	cfg.Subsystems[0].Model = "nvmetd test"
	s := startServer(t, cfg)
	addr := portAddr(s, 1)

	h := mustConnect(t, addr, testSubNQN)
	if h.cntlid < nvmeof.CNTLIDMin || h.cntlid > nvmeof.CNTLIDMax {
		t.Fatalf("CNTLID %#x", h.cntlid)
	}
	capv, err := h.propGet(nvmeof.PropCAP)
	if err != nil {
		t.Fatal(err)
	}
	c := nvmeof.CAP(capv)
	if c.MQES() != 127 || c.TO() != 15 || c.CSS() != nvmeof.CAPCSSNVM || c.MPSMIN() != 0 || c.CRMS() != 0 {
		t.Fatalf("CAP %v", c)
	}
	h.enable()

	id := h.identifyController()
	if err := id.CheckFabrics(h.cntlid, false); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"KAS", uint64(id.KAS()), nvmeof.NvmetKAS},
		{"IOCCSZ", uint64(id.IOCCSZ()), 260},
		{"IORCSZ", uint64(id.IORCSZ()), 1},
		{"ICDOFF", uint64(id.ICDOFF()), 0},
		{"MSDBD", uint64(id.MSDBD()), 1},
		{"SGLS", uint64(id.SGLS()), 0x100005},
		{"MDTS", uint64(id.MDTS()), 8},
		{"MAXCMD", uint64(id.MAXCMD()), 128},
		{"ONCS", uint64(id.ONCS()), nvmeof.ONCSDSM | nvmeof.ONCSWriteZeroes},
		{"VWC present", uint64(id.VWC() & nvmeof.VWCPresent), 1},
		{"OAES", uint64(id.OAES()), nvmeof.AECNSAttr | nvmeof.AECANAChange},
		{"CMIC", uint64(id.CMIC()), nvmeof.CMICMultiPort | nvmeof.CMICMultiCtrl | nvmeof.CMICANA},
		{"ANACAP", uint64(id.ANACAP()), 0x1F},
		{"ANATT", uint64(id.ANATT()), 10},
		{"ANAGRPMAX", uint64(id.ANAGRPMAX()), 128},
		{"NANAGRPID", uint64(id.NANAGRPID()), 128},
		{"CNTRLTYPE", uint64(id.CNTRLTYPE()), nvmeof.CntrlTypeIO},
		{"VER", uint64(id.VER()), uint64(nvmeof.VS1_3)},
		{"NN", uint64(id.NN()), 1024},
		{"SQES", uint64(id.SQES()), 0x66},
		{"CQES", uint64(id.CQES()), 0x44},
		{"LPA", uint64(id.LPA()), 7},
		{"AERL", uint64(id.AERL()), 3},
		{"CTRATT", uint64(id.CTRATT()), nvmeof.CTRATTHostID128 | nvmeof.CTRATTTBKAS},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("Identify Controller %s = %#x, want %#x", ck.name, ck.got, ck.want)
		}
	}
	if id.SUBNQN() != testSubNQN || id.SN() != "SERIAL-1" || id.MN() != "nvmetd test" {
		t.Errorf("identity %q %q %q", id.SUBNQN(), id.SN(), id.MN())
	}

	// The effects log (LPA bit 1) and Identify CNS 6 (VS >= 1.2).
	eff, err := h.getLog(nvmeof.LIDCommandEffects, nvmeof.NSIDAll, 0, nvmeof.CommandEffectsLogSize)
	if err != nil {
		t.Fatal(err)
	}
	el, _ := nvmeof.ParseCommandEffectsLog(eff)
	if el.IOCS(nvmeof.NVMWrite) != nvmeof.EffectsCSUPP|nvmeof.EffectsLBCC || el.ACS(nvmeof.AdminIdentify) != nvmeof.EffectsCSUPP {
		t.Errorf("effects: write %#x identify %#x", el.IOCS(nvmeof.NVMWrite), el.ACS(nvmeof.AdminIdentify))
	}
	if b, err := h.identify(nvmeof.CNSCSController, 0, nvmeof.CSINVM); err != nil || !bytes.Equal(b, make([]byte, 4096)) {
		t.Errorf("identify CNS 6: %v", err)
	}
	smart, err := h.getLog(nvmeof.LIDSMART, nvmeof.NSIDAll, 0, nvmeof.SMARTLogSize)
	if err != nil {
		t.Fatal(err)
	}
	if sl, _ := nvmeof.ParseSMARTLog(smart); sl.PowerCycles().Lo != 1 || sl.AvailableSpare() != 100 {
		t.Errorf("SMART power cycles %v spare %d", sl.PowerCycles(), sl.AvailableSpare())
	}

	// Number of queues, then AEN configuration and one AER.
	res, err := h.setFeature(nvmeof.FeatNumQueues, nvmeof.EncodeNumQueues(2, 2))
	if err != nil || res != nvmeof.EncodeNumQueues(2, 2) {
		t.Fatalf("number of queues: %#x %v", res, err)
	}
	if _, err := h.setFeature(nvmeof.FeatAsyncEventConfig, id.OAES()&nvmeof.AECLinuxHostMask); err != nil {
		t.Fatal(err)
	}
	aer := &rdma.HostRequest{}
	aer.SQE.BuildAER()
	aerDone := make(chan struct{})
	aer.Done = func(*rdma.HostRequest) { close(aerDone) }
	if err := h.admin.Submit(aer); err != nil {
		t.Fatal(err)
	}
	for qid := uint16(1); qid <= 2; qid++ {
		if _, err := h.connectIO(qid, 128); err != nil {
			t.Fatal(err)
		}
	}

	// Namespace scan: CNS 2, then for each NSID CNS 3, 8, 0.
	list, err := h.identify(nvmeof.CNSActiveNSList, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	nsids, err := nvmeof.ParseNSList(list, nil)
	if err != nil || len(nsids) != 2 || nsids[0] != 1 || nsids[1] != 3 {
		t.Fatalf("active namespaces %v %v", nsids, err)
	}
	if list, _ := h.identify(nvmeof.CNSActiveNSList, 1, 0); binary.LittleEndian.Uint32(list) != 3 {
		t.Fatalf("active list after NSID 1 starts with %d", binary.LittleEndian.Uint32(list))
	}
	seen := map[[16]byte]bool{}
	for _, nsid := range nsids {
		d, err := h.identify(nvmeof.CNSNSDescList, nsid, 0)
		if err != nil {
			t.Fatalf("CNS 3 of %d: %v", nsid, err)
		}
		ids, err := nvmeof.ParseNSDescriptors(d)
		if err != nil || !ids.HasNGUID || !ids.HasUUID || !ids.HasEUI64 || !ids.HasCSI || ids.CSI != nvmeof.CSINVM {
			t.Fatalf("descriptors of %d: %+v %v", nsid, ids, err)
		}
		if seen[ids.NGUID] {
			t.Fatalf("NGUID of %d not unique", nsid)
		}
		seen[ids.NGUID] = true
		ind, err := h.identify(nvmeof.CNSNSIndependent, nsid, 0)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := nvmeof.ParseIdentifyNSIndependent(ind); v.NSTAT()&nvmeof.NSTATReady == 0 || v.NMIC() != nvmeof.NMICShared {
			t.Fatalf("CNS 8 of %d: NSTAT %#x NMIC %#x", nsid, v.NSTAT(), v.NMIC())
		}
		b, err := h.identify(nvmeof.CNSNamespace, nsid, 0)
		if err != nil {
			t.Fatal(err)
		}
		ns, _ := nvmeof.ParseIdentifyNamespace(b)
		want := uint64(16 << 20 / 512)
		if nsid == 3 {
			want = 8 << 20 / 512
		}
		if ns.NSZE() != want || ns.NCAP() != want || ns.NMIC() != nvmeof.NMICShared || ns.LBAF(0).BlockSize() != 512 || ns.NGUID() != ids.NGUID || ns.EUI64() != ids.EUI64 {
			t.Fatalf("identify namespace %d: nsze %d ncap %d nmic %d bs %d", nsid, ns.NSZE(), ns.NCAP(), ns.NMIC(), ns.LBAF(0).BlockSize())
		}
	}
	// An inactive NSID: zeroes; the broadcast NSID: Invalid Namespace.
	if b, err := h.identify(nvmeof.CNSNamespace, 2, 0); err != nil || !bytes.Equal(b, make([]byte, 4096)) {
		t.Fatalf("inactive namespace: %v", err)
	}
	_, err = h.identify(nvmeof.CNSNamespace, nvmeof.NSIDAll, 0)
	wantStatus(t, "identify NSID all", err, nvmeof.StatusInvalidNamespace|nvmeof.StatusDNR)
	_, err = h.identify(nvmeof.CNSNSDescList, 2, 0)
	wantStatus(t, "descriptors of a namespace that does not exist", err, nvmeof.StatusInvalidNamespace|nvmeof.StatusDNR)
	_, err = h.identify(0x10, 0, 0)
	wantStatus(t, "identify CNS 0x10", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)

	// Keep alive, Get Features, Abort.
	ka := &rdma.HostRequest{}
	ka.SQE.BuildKeepAlive()
	if err := h.adminDo(ka); err != nil {
		t.Fatal(err)
	}
	if v, err := h.getFeature(nvmeof.FeatKeepAliveTimer); err != nil || v != testKATO {
		t.Fatalf("KATO %d %v", v, err)
	}
	if v, err := h.getFeature(nvmeof.FeatVolatileWC); err != nil || v != 1 {
		t.Fatalf("VWC %d %v", v, err)
	}
	if v, err := h.getFeature(nvmeof.FeatNumQueues); err != nil || v != nvmeof.EncodeNumQueues(2, 2) {
		t.Fatalf("number of queues %#x %v", v, err)
	}
	ab := &rdma.HostRequest{}
	ab.SQE.BuildAbort(1, 7)
	if err := h.adminDo(ab); err != nil || ab.CQE.Result()&nvmeof.AbortNotAborted == 0 {
		t.Fatalf("abort %#x %v", ab.CQE.Result(), err)
	}
	_, err = h.setFeature(nvmeof.FeatTimestamp, 0)
	wantStatus(t, "set timestamp", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	if _, err = h.setFeature(nvmeof.FeatAsyncEventConfig, nvmeof.AECANAChange|nvmeof.AECNSAttr); err != nil {
		t.Fatalf("enable ANA and namespace notices: %v", err)
	}
	_, err = h.setFeature(nvmeof.FeatNumQueues, nvmeof.EncodeNumQueues(4, 4))
	wantStatus(t, "number of queues after queues exist", err, nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR)

	// I/O on both queues.
	for i, q := range h.io {
		data := pattern(8192, i)
		if err := do(t, q, rw(true, 1, uint64(i*64), data, 512)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 8192)
		if err := do(t, q, rw(false, 1, uint64(i*64), got, 512)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back on queue %d: %v", i+1, err)
		}
	}

	// The AER is still held; the error log has the failures above.
	select {
	case <-aerDone:
		t.Fatalf("AER completed without an event: %v", aer.Status())
	default:
	}
	el2, err := h.getLog(nvmeof.LIDErrorInfo, 0, 0, 4*nvmeof.ErrorLogEntrySize)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := nvmeof.ParseErrorLogEntry(el2)
	if e.ErrorCount() == 0 || e.Status().Code() != nvmeof.StatusCommandSequenceError {
		t.Fatalf("newest error log entry: count %d status %v", e.ErrorCount(), e.Status())
	}

	// Status shows the controller and its queues.
	st := s.status()
	if len(st.Controllers) != 1 || st.Controllers[0].CNTLID != h.cntlid || st.Controllers[0].IOQueues != 2 ||
		st.Controllers[0].HostNQN != testHostNQN || st.Controllers[0].IO.WriteCommands != 2 || st.Controllers[0].KATOMillis != testKATO {
		t.Fatalf("status controllers %+v", st.Controllers)
	}
	if st.Ports[0].Connections != 3 || !st.Ports[0].Listening {
		t.Fatalf("status port %+v", st.Ports[0])
	}

	// Shutdown the controller as `nvme disconnect` does.
	var cc nvmeof.CC
	cc.SetIOSQES(6)
	cc.SetIOCQES(4)
	cc.SetEN(true)
	cc.SetSHN(nvmeof.CCSHNNormal)
	if err := h.propSet(nvmeof.PropCC, uint64(cc)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SHST complete", hang, func() bool {
		v, err := h.propGet(nvmeof.PropCSTS)
		return err == nil && nvmeof.CSTS(v).SHST() == nvmeof.SHSTComplete
	})
	h.close()
	waitFor(t, "controller gone", hang, func() bool { return len(s.status().Controllers) == 0 })
	// The AER was released when the admin queue went.
	<-aerDone
}

// TestControllerEnable covers the CC/CSTS state machine.
func TestControllerEnable(t *testing.T) {
	s := startServer(t, testConfig(t, memNS(1, "1MiB")))
	addr := portAddr(s, 1)
	h := mustConnect(t, addr, testSubNQN)

	// Before CC.EN only Fabrics commands work.
	_, err := h.identify(nvmeof.CNSController, 0, 0)
	wantStatus(t, "identify before enable", err, nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR)
	ka := &rdma.HostRequest{}
	ka.SQE.BuildKeepAlive()
	wantStatus(t, "keep alive before enable", h.adminDo(ka), nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR)
	// An I/O queue can be connected before enable (as nvmet), but its
	// commands fail.
	q, err := h.connectIO(1, 16)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "read before enable", do(t, q, rw(false, 1, 0, make([]byte, 512), 512)), nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR)

	// Bad CC values set CSTS.CFS.
	for _, tc := range []struct {
		name string
		cc   func(*nvmeof.CC)
	}{
		{"IOSQES 5", func(c *nvmeof.CC) { c.SetIOSQES(5) }},
		{"IOCQES 3", func(c *nvmeof.CC) { c.SetIOCQES(3) }},
		{"MPS 1", func(c *nvmeof.CC) { c.SetMPS(1) }},
		{"AMS 1", func(c *nvmeof.CC) { c.SetAMS(1) }},
		{"CSS 7", func(c *nvmeof.CC) { c.SetCSS(7) }},
	} {
		var cc nvmeof.CC
		cc.SetIOSQES(6)
		cc.SetIOCQES(4)
		tc.cc(&cc)
		cc.SetEN(true)
		if err := h.propSet(nvmeof.PropCC, uint64(cc)); err != nil {
			t.Fatal(err)
		}
		v, _ := h.propGet(nvmeof.PropCSTS)
		if cs := nvmeof.CSTS(v); !cs.CFS() || cs.RDY() {
			t.Errorf("%s: CSTS %v", tc.name, cs)
		}
		if err := h.propSet(nvmeof.PropCC, 0); err != nil {
			t.Fatal(err)
		}
		if v, _ := h.propGet(nvmeof.PropCC); v != 0 {
			t.Errorf("CC after disable %#x", v)
		}
	}
	// CSS 6 (all I/O command sets) is accepted as by nvmet.
	var cc nvmeof.CC
	cc.SetIOSQES(6)
	cc.SetIOCQES(4)
	cc.SetCSS(nvmeof.CCCSSCSI)
	cc.SetEN(true)
	if err := h.propSet(nvmeof.PropCC, uint64(cc)); err != nil {
		t.Fatal(err)
	}
	if v, _ := h.propGet(nvmeof.PropCSTS); !nvmeof.CSTS(v).RDY() {
		t.Fatalf("CSS 6: CSTS %v", nvmeof.CSTS(v))
	}
	if v, _ := h.propGet(nvmeof.PropCC); nvmeof.CC(v) != cc {
		t.Fatalf("CC reads %#x, wrote %#x", v, cc)
	}
	if err := do(t, q, rw(false, 1, 0, make([]byte, 512), 512)); err != nil {
		t.Fatal(err)
	}
	// Disable: RDY clears and I/O stops.
	if err := h.propSet(nvmeof.PropCC, 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := h.propGet(nvmeof.PropCSTS); nvmeof.CSTS(v).RDY() {
		t.Fatal("RDY after disable")
	}
	wantStatus(t, "read after disable", do(t, q, rw(false, 1, 0, make([]byte, 512), 512)), nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR)

	// Properties: 8-byte set, unknown offsets, 8-byte get of VS.
	r := &rdma.HostRequest{}
	r.SQE.BuildPropertySet(nvmeof.PropCC, 1)
	r.SQE.PropertySetCmd().SetSize(8)
	wantStatus(t, "8-byte property set", h.adminDo(r), nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	wantStatus(t, "set CAP", h.propSet(0x20, 1), nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	_, err = h.propGet(nvmeof.PropCRTO)
	wantStatus(t, "get CRTO", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	r = &rdma.HostRequest{}
	r.SQE.BuildPropertyGet(nvmeof.PropVS)
	r.SQE.PropertyGetCmd().SetSize(8)
	wantStatus(t, "8-byte get of VS", h.adminDo(r), nvmeof.StatusInvalidField|nvmeof.StatusDNR)
}

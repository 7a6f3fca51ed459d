package nvmeof

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// Golden vectors: real Linux 6.1 nvme-rdma host <-> nvmet-rdma target bytes
// (testdata/golden, see its README and capture_test.go).

const (
	labHostNQN  = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-6f66-4c61-9b00-000000000001"
	labSubNQN   = "nqn.2024-01.io.nvmeof-lab:kernel-target"
	labHostUUID = "6e766d65-6f66-4c61-9b00-000000000001"
)

func goldenSQE(t *testing.T, name string) *SQE {
	t.Helper()
	b := loadGolden(t, name)
	if len(b) != SQESize {
		t.Fatalf("%s: %d bytes", name, len(b))
	}
	s, err := ParseSQE(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func goldenCQE(t *testing.T, name string) *CQE {
	t.Helper()
	c, err := ParseCQE(loadGolden(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGoldenConnectSQE(t *testing.T) {
	for _, tc := range []struct {
		file    string
		qid     uint16
		sqsize  uint16
		kato    uint32
		sglID   uint8
		sglLen  uint32
		inCapsl bool
	}{
		{"sqe-disc-connect.hex", 0, 31, 0, SGLIDKeyedInvalidate, 1024, false},
		{"sqe-connect-admin.hex", 0, 31, 5000, SGLIDKeyedInvalidate, 1024, false},
		{"sqe-connect-io.hex", 1, 127, 0, SGLIDInCapsule, 1024, true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s := goldenSQE(t, tc.file)
			if s.Opcode() != OpFabrics || s.FCType() != FCTypeConnect || !s.IsFabrics() {
				t.Fatalf("opcode %#x fctype %#x", s.Opcode(), s.FCType())
			}
			if s.flags() != FlagPSDTSGL || s.PSDT() != 1 {
				t.Errorf("flags %#x", s.flags())
			}
			if s.DataDirection() != DirHostToController || !s.IsWrite() {
				t.Errorf("direction %v", s.DataDirection())
			}
			c := s.ConnectCmd()
			if c.RECFMT() != 0 || c.QID() != tc.qid || c.SQSize() != tc.sqsize || c.KATO() != tc.kato || c.cattr() != 0 {
				t.Errorf("recfmt %d qid %d sqsize %d kato %d cattr %d", c.RECFMT(), c.QID(), c.SQSize(), c.KATO(), c.cattr())
			}
			if c.QueueSize() != int(tc.sqsize)+1 {
				t.Errorf("queue size %d", c.QueueSize())
			}
			sgl := s.SGL1()
			if sgl.Identifier() != tc.sglID || sgl.Length() != tc.sglLen {
				t.Errorf("SGL id %#x len %d", sgl.Identifier(), sgl.Length())
			}
			d, err := s.DecodeSGL1()
			if err != nil {
				t.Fatal(err)
			}
			if (d.Kind == SGLInCapsule) != tc.inCapsl || d.Length != 1024 {
				t.Errorf("desc %+v", d)
			}
			if tc.inCapsl {
				if err := d.CheckInCapsule(1024); err != nil {
					t.Error(err)
				}
			} else if !d.Invalidate || d.Key == 0 || d.Addr == 0 {
				t.Errorf("keyed desc %+v", d)
			}
			if OpcodeName(tc.qid, s) != "Fabrics Connect" {
				t.Errorf("name %q", OpcodeName(tc.qid, s))
			}
		})
	}
}

func TestGoldenConnectData(t *testing.T) {
	for _, tc := range []struct {
		file   string
		subnqn string
		cntlid uint16
	}{
		{"connectdata-disc.hex", DiscoveryNQN, CNTLIDDynamic},
		{"connectdata-admin.hex", labSubNQN, CNTLIDDynamic},
		{"connectdata-io.hex", labSubNQN, 1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b := loadGolden(t, tc.file)
			d, err := ParseConnectData(b)
			if err != nil {
				t.Fatal(err)
			}
			if d.HostNQN() != labHostNQN || d.SubNQN() != tc.subnqn || d.CNTLID() != tc.cntlid {
				t.Errorf("hostnqn %q subnqn %q cntlid %#x", d.HostNQN(), d.SubNQN(), d.CNTLID())
			}
			if FormatUUID(d.HostID()) != labHostUUID {
				t.Errorf("hostid %s", FormatUUID(d.HostID()))
			}
			if id, ok := UUIDFromNQN(d.HostNQN()); !ok || id != d.HostID() {
				t.Errorf("host NQN UUID %x ok %v", id, ok)
			}
			for _, n := range []string{d.HostNQN(), d.SubNQN()} {
				if err := ValidateNQN(n); err != nil {
					t.Error(err)
				}
			}
			// Re-encode from the decoded fields: byte-identical.
			var e ConnectData
			e.SetHostID(d.HostID())
			e.SetCNTLID(d.CNTLID())
			e.SetSubNQN(d.SubNQN())
			e.SetHostNQN(d.HostNQN())
			if !bytes.Equal(e[:], b) {
				t.Error("re-encoded connect data differs")
			}
		})
	}
}

func TestGoldenCQEs(t *testing.T) {
	for _, tc := range []struct {
		file   string
		result uint64
		sqhd   uint16
		sqid   uint16
		cid    uint16
	}{
		{"cqe-disc-connect.hex", 1, 1, 0, 0},
		{"cqe-disc-propget-cap.hex", 0x00000820_0F00007F, 2, 0, 1},
		{"cqe-disc-propget-csts.hex", 1, 7, 0, 0x3000},
		{"cqe-disc-propget-vs.hex", 0x00010300, 8, 0, 0x3001},
		{"cqe-disc-propget-csts-shst.hex", 8, 15, 0, 0x4001},
		{"cqe-connect-admin.hex", 1, 1, 0, 0},
		{"cqe-connect-io.hex", 1, 1, 1, 0},
		{"cqe-setfeat-numqueues.hex", 0x007F007F, 13, 0, 0x100A},
		{"cqe-setfeat-aec.hex", 0x900, 14, 0, 0x100B},
		{"cqe-read.hex", 0, 2, 1, 0x41},
		{"cqe-write.hex", 0, 5, 1, 0x42},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c := goldenCQE(t, tc.file)
			if c.Result64() != tc.result || c.SQHead() != tc.sqhd || c.SQID() != tc.sqid || c.CID() != tc.cid {
				t.Errorf("result %#x sqhd %d sqid %d cid %#x", c.Result64(), c.SQHead(), c.SQID(), c.CID())
			}
			if c.Status() != StatusSuccess || c.err() != nil || c.phase() {
				t.Errorf("status %v", c.Status())
			}
			// Rebuild the completion.
			var sqe SQE
			sqe.SetCID(tc.cid)
			var e CQE
			e.Complete(&sqe, tc.sqid, tc.sqhd, uint32(tc.result), StatusSuccess)
			e.SetDW1(uint32(tc.result >> 32))
			if e != *c {
				t.Errorf("rebuilt %x, want %x", e, *c)
			}
		})
	}
	// Connect results.
	r := ConnectResponse(goldenCQE(t, "cqe-connect-admin.hex").Result())
	if r.CNTLID() != 1 || r.ATR() || r.ASCR() {
		t.Errorf("connect response %#x", uint32(r))
	}
	// Property values.
	cp := CAP(goldenCQE(t, "cqe-disc-propget-cap.hex").Result64())
	if cp.MQES() != 127 || cp.CQR() || cp.TO() != 15 || cp.CSS() != CAPCSSNVM|CAPCSSCSI || cp.MPSMIN() != 0 || cp.MPSMAX() != 0 {
		t.Errorf("%v", cp)
	}
	if v := VS(goldenCQE(t, "cqe-disc-propget-vs.hex").Result()); v != VS1_3 || v.String() != "1.3.0" {
		t.Errorf("VS %v", v)
	}
	if cs := CSTS(goldenCQE(t, "cqe-disc-propget-csts.hex").Result()); !cs.RDY() || cs.CFS() || cs.SHST() != SHSTNormal {
		t.Errorf("%v", cs)
	}
	if cs := CSTS(goldenCQE(t, "cqe-disc-propget-csts-shst.hex").Result()); cs.RDY() || cs.SHST() != SHSTComplete {
		t.Errorf("%v", cs)
	}
	if nsq, ncq := DecodeNumQueues(goldenCQE(t, "cqe-setfeat-numqueues.hex").Result()); nsq != 128 || ncq != 128 {
		t.Errorf("num queues %d %d", nsq, ncq)
	}
}

func TestGoldenPropertyCommands(t *testing.T) {
	for _, tc := range []struct {
		file   string
		get    bool
		offset uint32
		size   int
		value  uint64
	}{
		{"sqe-disc-propget-cap.hex", true, PropCAP, 8, 0},
		{"sqe-disc-propget-csts.hex", true, PropCSTS, 4, 0},
		{"sqe-disc-propget-vs.hex", true, PropVS, 4, 0},
		{"sqe-disc-propset-cc-en0.hex", false, PropCC, 4, 0x00460060},
		{"sqe-disc-propset-cc-en1.hex", false, PropCC, 4, 0x00460061},
		{"sqe-disc-propset-cc-shn.hex", false, PropCC, 4, 0x00464061},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s := goldenSQE(t, tc.file)
			if s.DataDirection() != DirNone || s.IsWrite() {
				t.Errorf("direction %v", s.DataDirection())
			}
			var b SQE
			if tc.get {
				c := s.PropertyGetCmd()
				if s.FCType() != FCTypePropertyGet || c.Offset() != tc.offset || c.size() != tc.size {
					t.Fatalf("fctype %d offset %#x size %d", s.FCType(), c.Offset(), c.size())
				}
				b.BuildPropertyGet(tc.offset)
			} else {
				c := s.PropertySetCmd()
				if s.FCType() != FCTypePropertySet || c.Offset() != tc.offset || c.Size() != tc.size || c.Value() != tc.value {
					t.Fatalf("fctype %d offset %#x size %d value %#x", s.FCType(), c.Offset(), c.Size(), c.Value())
				}
				b.BuildPropertySet(tc.offset, tc.value)
			}
			// The host's SGL field of property commands is a null keyed
			// descriptor; the builder leaves it to the caller.
			b.SGL1().SetNull()
			b.SetCID(s.CID())
			if b != *s {
				t.Errorf("built  %x\nwant %x", b, *s)
			}
		})
	}
	cc := CC(goldenSQE(t, "sqe-disc-propset-cc-shn.hex").PropertySetCmd().Value())
	if !cc.EN() || cc.CSS() != CCCSSCSI || cc.SHN() != CCSHNNormal || cc.IOSQES() != 6 || cc.IOCQES() != 4 || cc.MPS() != 0 || cc.AMS() != 0 {
		t.Errorf("%v", cc)
	}
}

func TestGoldenAdminCommands(t *testing.T) {
	// Identify commands.
	for _, tc := range []struct {
		file string
		cns  uint8
		nsid uint32
	}{
		{"sqe-disc-identify-ctrl.hex", CNSController, 0},
		{"sqe-identify-ctrl.hex", CNSController, 0},
		{"sqe-identify-cns6.hex", CNSCSController, 0},
		{"sqe-identify-nslist.hex", CNSActiveNSList, 0},
		{"sqe-identify-nsdesc.hex", CNSNSDescList, 1},
		{"sqe-identify-ns.hex", CNSNamespace, 1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s := goldenSQE(t, tc.file)
			c := s.IdentifyCmd()
			if s.Opcode() != AdminIdentify || c.CNS() != tc.cns || s.NSID() != tc.nsid || c.cntid() != 0 || c.CSI() != CSINVM {
				t.Fatalf("opcode %#x cns %d nsid %d", s.Opcode(), c.CNS(), s.NSID())
			}
			if s.DataDirection() != DirControllerToHost || s.SGL1().Length() != IdentifyDataSize {
				t.Errorf("direction %v length %d", s.DataDirection(), s.SGL1().Length())
			}
			var b SQE
			b.BuildIdentify(tc.cns, tc.nsid, 0, CSINVM)
			b.SetCID(s.CID())
			*b.SGL1() = *s.SGL1()
			if b != *s {
				t.Errorf("built  %x\nwant %x", b, *s)
			}
		})
	}
	// Get Log Page commands.
	for _, tc := range []struct {
		file  string
		lid   uint8
		nsid  uint32
		bytes uint64
		rae   bool
	}{
		{"sqe-disc-getlog-hdr.hex", LIDDiscovery, 0, 1024, true},
		{"sqe-disc-getlog-full.hex", LIDDiscovery, 0, 3072, false},
		{"sqe-getlog-effects.hex", LIDCommandEffects, 0, 4096, false},
		{"sqe-getlog-ana.hex", LIDANA, NSIDAll, 8208, false},
		{"sqe-getlog-smart.hex", LIDSMART, NSIDAll, 512, false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s := goldenSQE(t, tc.file)
			c := s.GetLogPageCmd()
			if s.Opcode() != AdminGetLogPage || c.LID() != tc.lid || s.NSID() != tc.nsid || c.NumBytes() != tc.bytes || c.RAE() != tc.rae {
				t.Fatalf("lid %#x nsid %#x bytes %d rae %v", c.LID(), s.NSID(), c.NumBytes(), c.RAE())
			}
			if c.LPO() != 0 || c.LSP() != 0 || c.lsi() != 0 || c.CSI() != 0 || c.OT() || c.uuidIndex() != 0 {
				t.Errorf("lpo %d lsp %d lsi %d", c.LPO(), c.LSP(), c.lsi())
			}
			if uint64(s.SGL1().Length()) != tc.bytes {
				t.Errorf("SGL length %d", s.SGL1().Length())
			}
			var b SQE
			bc := b.BuildGetLogPage(tc.lid, tc.nsid, 0, uint32(tc.bytes))
			bc.SetRAE(tc.rae)
			b.SetCID(s.CID())
			*b.SGL1() = *s.SGL1()
			if b != *s {
				t.Errorf("built  %x\nwant %x", b, *s)
			}
		})
	}
	// Set Features.
	for _, tc := range []struct {
		file  string
		fid   uint8
		value uint32
	}{
		{"sqe-disc-setfeat-aec.hex", FeatAsyncEventConfig, AECDiscoveryChange},
		{"sqe-setfeat-aec.hex", FeatAsyncEventConfig, AECNSAttr | AECANAChange},
		{"sqe-setfeat-numqueues.hex", FeatNumQueues, EncodeNumQueues(1, 1)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s := goldenSQE(t, tc.file)
			c := s.FeaturesCmd()
			if s.Opcode() != AdminSetFeatures || c.FID() != tc.fid || c.Value() != tc.value || c.sv() {
				t.Fatalf("fid %#x value %#x", c.FID(), c.Value())
			}
			var b SQE
			b.BuildSetFeatures(tc.fid, 0, tc.value, false)
			b.SetCID(s.CID())
			b.SGL1().SetNull()
			if b != *s {
				t.Errorf("built  %x\nwant %x", b, *s)
			}
		})
	}
	// AER.
	s := goldenSQE(t, "sqe-disc-aer.hex")
	if s.Opcode() != AdminAsyncEvent || s.CID() != aerCommandID || s.DataDirection() != DirNone {
		t.Errorf("AER opcode %#x cid %d", s.Opcode(), s.CID())
	}
	var b SQE
	b.BuildAER()
	b.SetCID(aerCommandID)
	b.SGL1().SetNull()
	if b != *s {
		t.Errorf("built AER %x\nwant %x", b, *s)
	}
}

func TestGoldenIOCommands(t *testing.T) {
	for _, tc := range []struct {
		file   string
		op     uint8
		slba   uint64
		blocks uint32
		sglID  uint8
		length uint32
	}{
		{"sqe-read-4k.hex", NVMRead, 0, 8, SGLIDKeyedInvalidate, 4096},
		{"sqe-read-128k.hex", NVMRead, 2048, 256, SGLIDKeyedInvalidate, 128 << 10},
		{"sqe-write-incapsule.hex", NVMWrite, 0, 8, SGLIDInCapsule, 4096},
	} {
		t.Run(tc.file, func(t *testing.T) {
			s := goldenSQE(t, tc.file)
			c := s.RWCmd()
			if s.Opcode() != tc.op || s.NSID() != 1 || c.SLBA() != tc.slba || c.Blocks() != tc.blocks || c.FUA() || c.lr() {
				t.Fatalf("op %#x nsid %d slba %d blocks %d", s.Opcode(), s.NSID(), c.SLBA(), c.Blocks())
			}
			if c.dataLength(9) != uint64(tc.length) {
				t.Errorf("data length %d", c.dataLength(9))
			}
			d, err := s.DecodeSGL1()
			if err != nil {
				t.Fatal(err)
			}
			if s.SGL1().Identifier() != tc.sglID || d.Length != tc.length {
				t.Errorf("desc %+v", d)
			}
			var b SQE
			if tc.op == NVMRead {
				b.BuildRead(1, tc.slba, tc.blocks)
			} else {
				b.BuildWrite(1, tc.slba, tc.blocks)
			}
			b.SetCID(s.CID())
			*b.SGL1() = *s.SGL1()
			if b != *s {
				t.Errorf("built  %x\nwant %x", b, *s)
			}
		})
	}
	s := goldenSQE(t, "sqe-flush.hex")
	var b SQE
	b.BuildFlush(1)
	b.SetCID(s.CID())
	if b != *s {
		t.Errorf("built flush %x\nwant %x", b, *s)
	}
	if OpcodeName(1, s) != "Flush" || OpcodeName(0, s) != "Delete I/O SQ" {
		t.Errorf("names %q %q", OpcodeName(1, s), OpcodeName(0, s))
	}
}

func TestGoldenIdentifyController(t *testing.T) {
	t.Run("nvm", func(t *testing.T) {
		c, err := ParseIdentifyController(loadGolden(t, "idctrl-nvm.hex"))
		if err != nil {
			t.Fatal(err)
		}
		checks := []struct {
			name      string
			got, want any
		}{
			{"VID", c.vid(), uint16(0)},
			{"SN", c.SN(), "0c680571070f32ceabfc"},
			{"MN", c.MN(), "Linux"},
			{"FR", c.FR(), "6.1.0-56"},
			{"RAB", c.rab(), uint8(6)},
			{"IEEE", c.ieee(), uint32(0)},
			{"CMIC", c.CMIC(), uint8(CMICMultiPort | CMICMultiCtrl | CMICANA)},
			{"MDTS", c.MDTS(), uint8(nvmetMDTS)},
			{"CNTLID", c.CNTLID(), uint16(1)},
			{"VER", c.VER(), VS1_3},
			{"OAES", c.OAES(), uint32(AECNSAttr | AECANAChange)},
			{"CTRATT", c.CTRATT(), uint32(CTRATTHostID128 | CTRATTTBKAS)},
			{"CNTRLTYPE", c.CNTRLTYPE(), uint8(CntrlTypeIO)},
			{"ACL", c.acl(), uint8(3)},
			{"AERL", c.AERL(), uint8(3)},
			{"FRMW", c.frmw(), uint8(3)},
			{"LPA", c.LPA(), uint8(LPASMARTPerNS | LPACommandEffects | LPAExtendedData)},
			{"ELPE", c.elpe(), uint8(127)},
			{"KAS", c.KAS(), uint16(NvmetKAS)},
			{"ANATT", c.ANATT(), uint8(10)},
			{"ANACAP", c.ANACAP(), uint8(0x1F)},
			{"ANAGRPMAX", c.ANAGRPMAX(), uint32(128)},
			{"NANAGRPID", c.NANAGRPID(), uint32(128)},
			{"SQES", c.SQES(), uint8(0x66)},
			{"CQES", c.CQES(), uint8(0x44)},
			{"MAXCMD", c.MAXCMD(), uint16(1024)},
			{"NN", c.NN(), uint32(1024)},
			{"ONCS", c.ONCS(), uint16(ONCSDSM | ONCSWriteZeroes)},
			{"VWC", c.VWC(), uint8(VWCPresent)},
			{"NWPC", c.nwpc(), uint8(1)},
			{"SGLS", c.SGLS(), uint32(sglsNvmet)},
			{"MNAN", c.MNAN(), uint32(1024)},
			{"SUBNQN", c.SUBNQN(), labSubNQN},
			{"IOCCSZ", c.IOCCSZ(), IOCCSZ(NvmetDefaultInlineDataSize)},
			{"IORCSZ", c.IORCSZ(), uint32(IORCSZ)},
			{"ICDOFF", c.ICDOFF(), uint16(ICDOFF)},
			{"FCATT", c.fcatt(), uint8(0)},
			{"MSDBD", c.MSDBD(), uint8(MSDBD)},
			{"OFCS", c.ofcs(), uint16(0)},
			{"DCTYPE", c.dctype(), uint8(dcTypeNotReported)},
			{"PSD0.MP", c.PSD(0).mp(), uint16(0x9C4)},
			{"PSD0.ENLAT", c.PSD(0).enlat(), uint32(16)},
			{"PSD0.EXLAT", c.PSD(0).exlat(), uint32(4)},
			{"InlineDataSize", c.InlineDataSize(), NvmetDefaultInlineDataSize},
			{"MaxTransferSize", c.MaxTransferSize(), 1 << 20},
		}
		for _, ch := range checks {
			if ch.got != ch.want {
				t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
			}
		}
		if err := c.CheckFabrics(1, false); err != nil {
			t.Error(err)
		}
		if err := c.CheckFabrics(2, false); err == nil {
			t.Error("CNTLID mismatch accepted")
		}
		if err := c.CheckFabrics(1, true); err == nil {
			t.Error("I/O controller accepted for a discovery connect")
		}
		// Rebuild the structure from the decoded fields: byte-identical.
		var e IdentifyController
		e.SetSN(c.SN())
		e.SetMN(c.MN())
		e.SetFR(c.FR())
		e.SetRAB(c.rab())
		e.SetCMIC(c.CMIC())
		e.SetMDTS(c.MDTS())
		e.SetCNTLID(c.CNTLID())
		e.SetVER(c.VER())
		e.SetOAES(c.OAES())
		e.SetCTRATT(c.CTRATT())
		e.SetCNTRLTYPE(c.CNTRLTYPE())
		e.SetACL(c.acl())
		e.SetAERL(c.AERL())
		e.SetFRMW(c.frmw())
		e.SetLPA(c.LPA())
		e.SetELPE(c.elpe())
		e.SetKAS(c.KAS())
		e.SetANATT(c.ANATT())
		e.SetANACAP(c.ANACAP())
		e.SetANAGRPMAX(c.ANAGRPMAX())
		e.SetNANAGRPID(c.NANAGRPID())
		e.SetSQES(c.SQES())
		e.SetCQES(c.CQES())
		e.SetMAXCMD(c.MAXCMD())
		e.SetNN(c.NN())
		e.SetONCS(c.ONCS())
		e.SetVWC(c.VWC())
		e.setNWPC(c.nwpc())
		e.SetSGLS(c.SGLS())
		e.SetMNAN(c.MNAN())
		e.SetSUBNQN(c.SUBNQN())
		e.SetIOCCSZ(c.IOCCSZ())
		e.SetIORCSZ(c.IORCSZ())
		e.SetMSDBD(c.MSDBD())
		e.PSD(0).SetMP(c.PSD(0).mp())
		e.PSD(0).SetENLAT(c.PSD(0).enlat())
		e.PSD(0).SetEXLAT(c.PSD(0).exlat())
		if e != *c {
			for i := range e {
				if e[i] != c[i] {
					t.Fatalf("rebuilt identify controller differs first at byte %d: %#x, want %#x", i, e[i], c[i])
				}
			}
		}
	})
	t.Run("discovery", func(t *testing.T) {
		c, err := ParseIdentifyController(loadGolden(t, "idctrl-disc.hex"))
		if err != nil {
			t.Fatal(err)
		}
		if c.CNTLID() != 1 || c.CNTRLTYPE() != CntrlTypeDiscovery || c.SUBNQN() != DiscoveryNQN ||
			c.OAES() != AECDiscoveryChange || c.KAS() != 0 || c.SGLS() != sglsNvmet || c.MAXCMD() != 1024 ||
			c.LPA() != LPAExtendedData || c.VER() != VS1_3 || c.MN() != "Linux" {
			t.Errorf("%v OAES %#x KAS %d SGLS %#x", c, c.OAES(), c.KAS(), c.SGLS())
		}
		if err := c.CheckFabrics(1, true); err != nil {
			t.Error(err)
		}
	})
}

func TestGoldenIdentifyNamespace(t *testing.T) {
	n, err := ParseIdentifyNamespace(loadGolden(t, "idns.hex"))
	if err != nil {
		t.Fatal(err)
	}
	const blocks = 1 << 30 / 512
	if n.NSZE() != blocks || n.NCAP() != blocks || n.nuse() != blocks || n.nsfeat() != nsfeatAtomics|NSFEATOptimalIO ||
		n.NLBAF() != 0 || n.FLBAS() != 0 || n.NMIC() != NMICShared || n.ANAGRPID() != 1 || n.NSATTR() != 0 ||
		n.dps() != 0 || n.NGUID() != [16]byte{} || n.EUI64() != [8]byte{} {
		t.Errorf("NSZE %d NCAP %d NUSE %d NSFEAT %#x NMIC %d ANAGRPID %d", n.NSZE(), n.NCAP(), n.nuse(), n.nsfeat(), n.NMIC(), n.ANAGRPID())
	}
	if f := n.LBAF(0); f != (LBAFormat{LBADS: 9}) || n.blockSize() != 512 || n.FormatIndex() != 0 {
		t.Errorf("LBAF0 %+v block size %d", f, n.blockSize())
	}
	var e IdentifyNamespace
	e.SetNSZE(blocks)
	e.SetNCAP(blocks)
	e.SetNUSE(blocks)
	e.SetNSFEAT(n.nsfeat())
	e.SetNMIC(NMICShared)
	e.SetANAGRPID(1)
	e.SetLBAF(0, LBAFormat{LBADS: 9})
	if e != *n {
		t.Error("rebuilt identify namespace differs")
	}

	ids, err := ParseNSDescriptors(loadGolden(t, "nsdesc.hex"))
	if err != nil {
		t.Fatal(err)
	}
	if !ids.HasUUID || ids.HasNGUID || ids.HasEUI64 || !ids.HasCSI || ids.CSI != CSINVM ||
		FormatUUID(ids.UUID) != "923660b2-d984-4f11-a954-7305d21c299b" {
		t.Errorf("%+v", ids)
	}
	var buf [IdentifyDataSize]byte
	if _, err := EncodeNSDescriptors(buf[:], ids); err != nil || !bytes.Equal(buf[:], loadGolden(t, "nsdesc.hex")) {
		t.Errorf("re-encoded descriptors differ (%v)", err)
	}

	list, err := ParseNSList(loadGolden(t, "nslist.hex"), nil)
	if err != nil || len(list) != 1 || list[0] != 1 {
		t.Errorf("ns list %v %v", list, err)
	}
	EncodeNSList(buf[:], []uint32{1}, 0)
	if !bytes.Equal(buf[:], loadGolden(t, "nslist.hex")) {
		t.Error("re-encoded ns list differs")
	}

	nvm, err := ParseIdentifyControllerNVM(loadGolden(t, "idctrl-nvmcs.hex"))
	if err != nil || *nvm != (IdentifyControllerNVM{}) {
		t.Errorf("CNS 6 data not zero (%v)", err)
	}
}

func TestGoldenDiscoveryLog(t *testing.T) {
	full := loadGolden(t, "disclog.hex")
	l, err := ParseDiscoveryLog(full)
	if err != nil {
		t.Fatal(err)
	}
	if l.GenCtr != 0x12 || l.NumRec != 2 || l.RecFmt != 0 || len(l.Entries) != 2 {
		t.Fatalf("%+v", l)
	}
	want := []DiscoveryEntry{
		{TrType: TrTypeRDMA, AdrFam: AdrFamIPv4, SubType: SubTypeCurrentDiscovery, TReq: TREQDisableSQFlow, PortID: 1,
			CntlID: CNTLIDDynamic, ASQSZ: 32, TrSvcID: "4420", SubNQN: DiscoveryNQN, TrAddr: "10.0.2.15",
			RDMAQPType: RDMAQPTypeRC, RDMAPRType: RDMAPRTypeNone, RDMACMS: RDMACMSRDMACM},
		{TrType: TrTypeRDMA, AdrFam: AdrFamIPv4, SubType: SubTypeNVMe, TReq: TREQDisableSQFlow, PortID: 1,
			CntlID: CNTLIDDynamic, ASQSZ: 32, TrSvcID: "4420", SubNQN: labSubNQN, TrAddr: "10.0.2.15",
			RDMAQPType: RDMAQPTypeRC, RDMAPRType: RDMAPRTypeNone, RDMACMS: RDMACMSRDMACM},
	}
	for i := range want {
		if l.Entries[i] != want[i] {
			t.Errorf("entry %d = %+v\nwant %+v", i, l.Entries[i], want[i])
		}
	}
	// Re-encode: byte-identical.
	enc, err := AppendDiscoveryLog(nil, l.GenCtr, l.Entries)
	if err != nil || !bytes.Equal(enc, full) {
		t.Errorf("re-encoded discovery log differs (%v)", err)
	}
	// The host's partial reads: the 1024-byte header read, a 20-byte header
	// read, then the entries at their LPO.
	hdr := loadGolden(t, "disclog-hdr.hex")
	for _, b := range [][]byte{hdr, hdr[:20]} {
		g, n, err := ParseDiscoveryLogHeader(b)
		if err != nil || g != 0x12 || n != 2 {
			t.Errorf("header read of %d bytes: %d %d %v", len(b), g, n, err)
		}
	}
	var got []DiscoveryEntry
	for i := uint64(0); i < 2; i++ {
		lpo := DiscoveryLogEntryOffset(i)
		chunk := make([]byte, DiscoveryLogEntrySize)
		if err := CopyLogPage(chunk, full, lpo); err != nil {
			t.Fatal(err)
		}
		if got, err = ParseDiscoveryLogEntries(chunk, got); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("entries read piecewise: %+v", got)
	}
}

func TestGoldenLogs(t *testing.T) {
	ana, err := ParseANALog(loadGolden(t, "log-ana.hex"))
	if err != nil {
		t.Fatal(err)
	}
	if ana.ChangeCount != 0 || len(ana.Groups) != 1 {
		t.Fatalf("%+v", ana)
	}
	if g := ana.Groups[0]; g.ID != 1 || g.State != ANAOptimized || len(g.NSIDs) != 1 || g.NSIDs[0] != 1 || g.ChangeCount != 0 {
		t.Errorf("%+v", g)
	}
	enc, err := AppendANALog(nil, 0, ana.Groups, false)
	golden := loadGolden(t, "log-ana.hex")
	if err != nil || len(enc) != ANALogSize(ana.Groups, false) || !bytes.Equal(enc, golden[:len(enc)]) {
		t.Errorf("re-encoded ANA log differs (%v)", err)
	}
	for _, b := range golden[len(enc):] {
		if b != 0 {
			t.Fatal("ANA log buffer not zero after the groups")
		}
	}

	smart, err := ParseSMARTLog(loadGolden(t, "log-smart.hex"))
	if err != nil {
		t.Fatal(err)
	}
	if smart.dataUnitsRead() != U128(1) || smart.HostReadCommands() != U128(3) || smart.criticalWarning() != 0 ||
		smart.DataUnitsWritten() != U128(0) || smart.powerOnHours() != U128(0) {
		t.Errorf("DUR %v HRC %v", smart.dataUnitsRead(), smart.HostReadCommands())
	}

	eff, err := ParseCommandEffectsLog(loadGolden(t, "log-effects.hex"))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []uint8{AdminGetLogPage, AdminIdentify, AdminAbort, AdminSetFeatures, AdminGetFeatures, AdminAsyncEvent, AdminKeepAlive} {
		if eff.ACS(op) != EffectsCSUPP {
			t.Errorf("ACS(%#x) = %#x", op, eff.ACS(op))
		}
	}
	for _, op := range []uint8{NVMFlush, NVMDatasetManagement} {
		if eff.IOCS(op) != EffectsCSUPP {
			t.Errorf("IOCS(%#x) = %#x", op, eff.IOCS(op))
		}
	}
	for _, op := range []uint8{NVMWrite, NVMRead, NVMWriteZeroes} {
		if eff.IOCS(op)&EffectsCSUPP == 0 {
			t.Errorf("IOCS(%#x) = %#x", op, eff.IOCS(op))
		}
	}
}

func hexs(b []byte) string { return hex.EncodeToString(b) }

package nvmeof

import (
	"testing"
)

// Hand-checked layouts of the command views against the byte offsets of
// NVMe Base 2.0 / NVMe-oF 1.1 (and Linux's struct definitions).
func TestSQELayout(t *testing.T) {
	var s SQE
	s.SetOpcode(0x02)
	s.SetFlags(0x40)
	s.SetCID(0xA1B2)
	s.SetNSID(0x01020304)
	s.setCDW2(0x11111111)
	s.setCDW3(0x22222222)
	s.setMPTR(0x3333333333333333)
	s.setCDW10(0xAAAAAAAA)
	s.SetCDW11(0xBBBBBBBB)
	s.SetCDW12(0xCCCCCCCC)
	s.setCDW13(0xDDDDDDDD)
	s.setCDW14(0xEEEEEEEE)
	s.setCDW15(0xFFFFFFFF)
	want := "0240b2a104030201" + "1111111122222222" + "3333333333333333" +
		"00000000000000000000000000000000" +
		"aaaaaaaabbbbbbbbccccccccddddddddeeeeeeeeffffffff"
	if got := hexs(s[:]); got != want {
		t.Errorf("SQE\n got %s\nwant %s", got, want)
	}
	for n, v := range map[int]uint32{0: 0xA1B24002, 1: 0x01020304, 10: 0xAAAAAAAA, 15: 0xFFFFFFFF, 16: 0, -1: 0} {
		if s.CDW(n) != v {
			t.Errorf("CDW(%d) = %#x", n, s.CDW(n))
		}
	}
	s.SetCDW(16, 1) // ignored
	s.SetFUSE(flagFuseSecond)
	s.SetPSDT(2)
	if s.flags() != 0x82 || s.FUSE() != 2 || s.PSDT() != 2 {
		t.Errorf("flags %#x", s.flags())
	}
	s.reset()
	if s != (SQE{}) {
		t.Error("Reset")
	}
	if _, err := ParseSQE(make([]byte, 63)); err == nil {
		t.Error("short SQE accepted")
	}
	b := make([]byte, 100)
	p, err := ParseSQE(b)
	if err != nil {
		t.Fatal(err)
	}
	p.SetCID(7)
	if b[2] != 7 {
		t.Error("ParseSQE does not alias its input")
	}
}

func TestCQELayout(t *testing.T) {
	var c CQE
	c.SetResult(0x11223344)
	c.SetDW1(0x55667788)
	c.SetSQHead(0x0102)
	c.SetSQID(0x0304)
	c.SetCID(0x0506)
	c.setPhase(true)
	c.SetStatus(StatusInvalidField | StatusDNR)
	if got, want := hexs(c[:]), "4433221188776655"+"0201"+"0403"+"0605"+"0580"; got != want {
		t.Errorf("CQE %s, want %s", got, want)
	}
	if c.Result64() != 0x5566778811223344 || c.Status() != 0x4002 || !c.phase() || c.RawStatus() != 0x8005 {
		t.Errorf("result64 %#x status %v", c.Result64(), c.Status())
	}
	c.setPhase(false)
	if c.RawStatus() != 0x8004 || c.err() == nil {
		t.Errorf("raw %#x", c.RawStatus())
	}
	c.setResult64(1)
	if c.Result() != 1 || c.dw1() != 0 {
		t.Error("Result64")
	}
	if _, err := ParseCQE(make([]byte, 15)); err == nil {
		t.Error("short CQE accepted")
	}
}

func TestDataDirection(t *testing.T) {
	for _, tc := range []struct {
		op, fctype uint8
		want       DataDirection
		write      bool
	}{
		{NVMFlush, 0, DirNone, false},
		{NVMWrite, 0, DirHostToController, true},
		{NVMRead, 0, DirControllerToHost, false},
		{NVMWriteZeroes, 0, DirNone, false},
		{NVMDatasetManagement, 0, DirHostToController, true},
		{AdminIdentify, 0, DirControllerToHost, false},
		{AdminGetLogPage, 0, DirControllerToHost, false},
		{AdminSetFeatures, 0, DirHostToController, true},
		{AdminGetFeatures, 0, DirControllerToHost, false},
		{AdminAsyncEvent, 0, DirNone, false},
		{AdminKeepAlive, 0, DirNone, false},
		{OpFabrics, FCTypeConnect, DirHostToController, true},
		{OpFabrics, FCTypePropertyGet, DirNone, false},
		{OpFabrics, FCTypePropertySet, DirNone, false},
		{OpFabrics, FCTypeAuthSend, DirHostToController, true},
		{OpFabrics, FCTypeAuthReceive, DirControllerToHost, false},
		{OpFabrics, FCTypeDisconnect, DirNone, false},
		{0x03, 0, dirBidirectional, true},
	} {
		var s SQE
		s.SetOpcode(tc.op)
		s.SetFCType(tc.fctype)
		if s.DataDirection() != tc.want || s.IsWrite() != tc.write {
			t.Errorf("op %#x fctype %#x: %v write %v", tc.op, tc.fctype, s.DataDirection(), s.IsWrite())
		}
	}
	if dirBidirectional.String() != "bidirectional" || DirNone.String() != "none" {
		t.Error("String")
	}
}

func TestBuilders(t *testing.T) {
	var s SQE
	s.SetCID(99) // builders start from zero
	c := s.BuildRead(1, 0x1122334455, 65536)
	if s.CID() != 0 || s.flags() != FlagPSDTSGL || c.NLB() != 0xFFFF || c.Blocks() != 65536 || c.SLBA() != 0x1122334455 {
		t.Errorf("read: %x", s)
	}
	if last, ok := c.LastLBA(); !ok || last != 0x1122334455+0xFFFF {
		t.Errorf("last %#x", last)
	}
	c.SetSLBA(^uint64(0))
	if _, ok := c.LastLBA(); ok {
		t.Error("LastLBA overflow not reported")
	}
	w := s.BuildWrite(2, 8, 1)
	w.SetFUA(true)
	w.setLR(true)
	w.setPRINFO(0xF)
	w.setDTYPE(2)
	w.setDSM(0x12)
	w.setDSPEC(0x3456)
	if s.CDW12() != 0xFC200000 || !w.FUA() || !w.lr() || w.prinfo() != 0xF || w.dtype() != 2 || s.cdw13() != 0x34560012 {
		t.Errorf("CDW12 %#x CDW13 %#x", s.CDW12(), s.cdw13())
	}
	w.SetFUA(false)
	if s.CDW12()&RWFUA != 0 {
		t.Error("SetFUA(false)")
	}
	z := s.BuildWriteZeroes(1, 0, 16)
	z.setDEAC(true)
	z.SetFUA(true)
	if s.Opcode() != NVMWriteZeroes || s.CDW12() != 0x4200000F || !z.deac() || s.SGL1().Identifier() != SGLIDKeyed || s.DataDirection() != DirNone {
		t.Errorf("write zeroes %x", s)
	}
	d := s.BuildDSM(1, 256, DSMAD)
	if s.cdw10() != 0xFF || !d.AD() || d.NumRanges() != 256 || d.DataLength() != 4096 {
		t.Errorf("dsm %x", s)
	}
	d.setAD(false)
	d.SetAttributes(dsmidr | dsmidw)
	if d.AD() || d.attributes() != 3 {
		t.Error("DSM attributes")
	}
	a := s.BuildAbort(3, 0x1234)
	if s.Opcode() != AdminAbort || s.cdw10() != 0x12340003 || a.sqid() != 3 || a.abortCID() != 0x1234 {
		t.Errorf("abort %x", s)
	}
	s.BuildKeepAlive()
	if s.Opcode() != AdminKeepAlive || OpcodeName(0, &s) != "Keep Alive" {
		t.Errorf("keep alive %x", s)
	}
	g := s.BuildGetLogPage(LIDSMART, NSIDAll, 0x100000004, 0)
	if g.NumBytes() != 4 || g.LPO() != 0x100000004 || s.CDW12() != 4 || s.cdw13() != 1 {
		t.Errorf("get log page %x", s)
	}
	g.SetNumBytes(0x40001 * 4) // NUMD 0x40000: NUMDL 0, NUMDU 4
	g.SetLSP(0x7F)
	g.SetRAE(true)
	g.setLSI(0xBEEF)
	g.setOT(true)
	g.SetCSI(CSIZNS)
	g.setUUIDIndex(0x7F)
	if s.cdw10() != 0x0000FF02 || s.CDW11() != 0xBEEF0004 || s.cdw14() != 0x0280007F || g.NUMD() != 0x40000 || g.NumBytes() != 0x40001*4 {
		t.Errorf("get log page CDW10 %#x CDW11 %#x CDW14 %#x", s.cdw10(), s.CDW11(), s.cdw14())
	}
	g.SetNumBytes(5) // rounds up to 8
	if g.NumBytes() != 8 {
		t.Errorf("rounded %d", g.NumBytes())
	}
	i := s.BuildIdentify(cnsControllerList, 5, 0x1234, CSIZNS)
	i.setCNSSID(0x5678)
	i.setUUIDIndex(3)
	if s.cdw10() != 0x12340013 || s.CDW11() != 0x02005678 || s.cdw14() != 3 || s.NSID() != 5 {
		t.Errorf("identify %x", s)
	}
	f := s.BuildSetFeatures(FeatKeepAliveTimer, 0, 5000, true)
	if s.cdw10() != 0x8000000F || f.Value() != 5000 || !f.sv() {
		t.Errorf("set features %x", s)
	}
	f.SetSV(false)
	f.setUUIDIndex(1)
	if f.sv() || f.uuidIndex() != 1 {
		t.Error("SV")
	}
	gf := s.BuildGetFeatures(FeatNumQueues, 0, featSelSupported)
	if s.Opcode() != AdminGetFeatures || s.cdw10() != 0x307 || gf.sel() != featSelSupported || gf.FID() != FeatNumQueues {
		t.Errorf("get features %x", s)
	}
	cn := s.BuildConnect(3, 127, 0)
	cn.setCATTR(cattrDisableSQFlow)
	cn.SetRECFMT(1)
	if hexs(s[40:52]) != "010003007f00040000000000" {
		t.Errorf("connect %x", s[40:52])
	}
	pg := s.BuildPropertyGet(PropCAP)
	if s[40] != 1 || pg.size() != 8 || pg.Offset() != 0 || pg.Attrib() != 1 {
		t.Errorf("property get %x", s)
	}
	pg.SetSize(4)
	pg.setAttrib(pg.Attrib())
	if pg.size() != 4 {
		t.Error("size")
	}
	ps := s.BuildPropertySet(PropCC, 0xFFFFFFFF00460001)
	if ps.Size() != 4 || ps.Value() != 0x00460001 || s.CDW12() != 0x00460001 || s.cdw13() != 0xFFFFFFFF {
		t.Errorf("property set %x", s)
	}
	ps.SetSize(8)
	if ps.Value() != 0xFFFFFFFF00460001 || ps.Attrib() != 1 {
		t.Error("8-byte property set")
	}
	dc := s.BuildDisconnect()
	if s.Opcode() != OpFabrics || s.FCType() != FCTypeDisconnect || dc.recfmt() != 0 || OpcodeName(0, &s) != "Fabrics Disconnect" {
		t.Errorf("disconnect %x", s)
	}
	dc.setRECFMT(0)
	s.BuildFlush(NSIDAll)
	if s.NSID() != NSIDAll || s.Opcode() != NVMFlush {
		t.Error("flush")
	}
}

func TestAuthPlaceholder(t *testing.T) {
	var s SQE
	s.init(OpFabrics)
	s.SetFCType(FCTypeAuthSend)
	a := s.AuthCmd()
	a.SetSECP(AuthProtocolDHCHAP)
	a.SetSPSP0(1)
	a.SetSPSP1(2)
	a.SetLength(0x1234)
	if !s.IsAuth() || hexs(s[40:48]) != "000102e934120000" || a.SECP() != AuthProtocolDHCHAP || a.SPSP0() != 1 || a.SPSP1() != 2 || a.Length() != 0x1234 {
		t.Errorf("auth %x", s[40:48])
	}
	if OpcodeName(0, &s) != "Fabrics Authentication Send" {
		t.Error(OpcodeName(0, &s))
	}
	s.SetFCType(0x7E)
	if OpcodeName(0, &s) != "Fabrics unknown" || s.IsAuth() {
		t.Error("unknown fctype")
	}
	if r := ConnectResponse(1 | ConnectATR); !r.ATR() || r.ASCR() || r.CNTLID() != 1 {
		t.Error("ATR")
	}
	if r := ConnectResponse(ConnectASCR); !r.ASCR() || r.ATR() {
		t.Error("ASCR")
	}
}

// TestBuildAuth checks the Authentication Send/Receive SQEs against what
// Linux nvme_auth_submit sends: opcode 7Fh, PSDT SGL, FCTYPE 05h/06h, SPSP0 =
// SPSP1 = 01h, SECP E9h, TL/AL.
func TestBuildAuth(t *testing.T) {
	var s SQE
	s.BuildAuthSend(72)
	if hexs(s[0:5]) != "7f40000005" || hexs(s[40:48]) != "000101e948000000" || s.DataDirection() != DirHostToController {
		t.Errorf("auth send %x", s[:])
	}
	s.BuildAuthReceive(4096)
	if hexs(s[0:5]) != "7f40000006" || hexs(s[40:48]) != "000101e900100000" || s.DataDirection() != DirControllerToHost {
		t.Errorf("auth receive %x", s[:])
	}
	if s.AuthCmd().SPSP0() != 1 || int(s[AuthSQEOffSECP]) != AuthProtocolDHCHAP || s[AuthSQEOffSPSP1] != 1 || s[AuthSQEOffTL+1] != 0x10 {
		t.Error("offsets")
	}
}

// The data path must not allocate: SQE and CQE encode and decode.
func TestSQECQENoAlloc(t *testing.T) {
	buf := make([]byte, SQESize+4096)
	cbuf := make([]byte, CQESize)
	var sink uint64
	allocs := testing.AllocsPerRun(1000, func() {
		s, _ := ParseSQE(buf)
		c := s.BuildRead(1, 100, 8)
		s.SetCID(0x1001)
		s.SGL1().SetKeyed(0xFFFF0000, 4096, 0x12345678, true)
		d, err := s.DecodeSGL1()
		if err != nil {
			panic(err)
		}
		sink += c.SLBA() + uint64(c.Blocks()) + uint64(d.Length) + uint64(s.DataDirection())
		w := s.BuildWrite(1, 100, 8)
		s.SGL1().SetInCapsule(0, 4096)
		if d, err := s.DecodeSGL1(); err != nil || d.CheckInCapsule(4096) != nil {
			panic(err)
		}
		sink += uint64(w.NLB())
		cq, _ := ParseCQE(cbuf)
		cq.Complete(s, 1, 5, 0, StatusSuccess)
		sink += uint64(cq.CID()) + uint64(cq.Status()) + uint64(cq.SQHead())
		if cq.err() != nil {
			panic("status")
		}
		s.BuildConnect(1, 127, 0)
		sink += uint64(s.ConnectCmd().QID())
		s.BuildPropertyGet(PropCSTS)
		cq.setResult64(1)
		sink += cq.Result64()
		g := s.BuildGetLogPage(LIDSMART, NSIDAll, 0, 512)
		sink += g.NumBytes()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per SQE/CQE round", allocs)
	}
	_ = sink
}

func BenchmarkSQEReadDecode(b *testing.B) {
	var s SQE
	s.BuildRead(1, 100, 8)
	s.SGL1().SetKeyed(0xFFFF0000, 4096, 0x12345678, true)
	b.ReportAllocs()
	var sink uint64
	for b.Loop() {
		c := s.RWCmd()
		d, _ := s.DecodeSGL1()
		sink += c.SLBA() + uint64(c.Blocks()) + uint64(d.Length)
	}
	_ = sink
}

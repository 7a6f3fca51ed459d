package nvmeof

import "testing"

func TestCAP(t *testing.T) {
	var c CAP
	c.SetMQES(127)
	c.SetCQR(true)
	c.setAMS(3)
	c.SetTO(15)
	c.setDSTRD(0xF)
	c.setNSSRS(true)
	c.SetCSS(CAPCSSNVM | CAPCSSCSI)
	c.setBPS(true)
	c.setMPSMIN(0)
	c.setMPSMAX(4)
	c.setCRMS(CRMSCRWMS)
	// MQES 0x7F, CQR bit16, AMS 18..17, TO 31..24, DSTRD 35..32, NSSRS 36,
	// CSS 44..37 (0x41), BPS 45, MPSMAX 55..52, CRMS 60..59.
	want := uint64(0x7F) | 1<<16 | 3<<17 | 15<<24 | 0xF<<32 | 1<<36 | 0x41<<37 | 1<<45 | 4<<52 | 1<<59
	if uint64(c) != want {
		t.Errorf("CAP %#x, want %#x", uint64(c), want)
	}
	if c.MQES() != 127 || !c.CQR() || c.ams() != 3 || c.TO() != 15 || c.dstrd() != 15 || !c.nssrs() ||
		c.CSS() != 0x41 || !c.bps() || c.MPSMIN() != 0 || c.MPSMAX() != 4 || c.CRMS() != CRMSCRWMS {
		t.Errorf("%v", c)
	}
	c.SetCQR(false)
	c.SetMQES(0xFFFF)
	if c.CQR() || c.MQES() != 0xFFFF || c.ams() != 3 {
		t.Error("field isolation")
	}
	// The protocol.md §11.3 suggestion.
	var s CAP
	s.SetMQES(127)
	s.SetTO(15)
	s.SetCSS(CAPCSSNVM)
	if s != 0x0000_0020_0F00_007F {
		t.Errorf("suggested CAP %#x", uint64(s))
	}
}

func TestVSCCCSTS(t *testing.T) {
	v := Version(2, 1, 3)
	if v != 0x00020103 || v.Major() != 2 || v.Minor() != 1 || v.Tertiary() != 3 || v.String() != "2.1.3" {
		t.Errorf("%v", v)
	}
	if !VS1_3.AtLeast(1, 2) || vs1_2.AtLeast(1, 3) || !vs2_0.AtLeast(1, 4) || vs1_4.AtLeast(2, 0) {
		t.Error("AtLeast")
	}
	var cc CC
	cc.SetIOCQES(4)
	cc.SetIOSQES(6)
	if cc != 0x00460000 {
		t.Errorf("CC %#x", uint32(cc))
	}
	cc.SetEN(true)
	cc.SetCSS(CCCSSCSI)
	cc.SetSHN(CCSHNNormal)
	cc.SetMPS(1)
	cc.SetAMS(7)
	cc.SetCRIME(true)
	if cc != 0x0146_78E1 || !cc.EN() || cc.CSS() != 6 || cc.SHN() != 1 || cc.MPS() != 1 || cc.AMS() != 7 || !cc.CRIME() {
		t.Errorf("%v", cc)
	}
	var cs CSTS
	cs.SetRDY(true)
	cs.SetSHST(SHSTComplete)
	cs.SetCFS(true)
	cs.setNSSRO(true)
	cs.setPP(true)
	if cs != 0x3B || !cs.RDY() || !cs.CFS() || cs.SHST() != 2 || !cs.NSSRO() || !cs.PP() {
		t.Errorf("%v", cs)
	}
	cs.SetRDY(false)
	if cs.RDY() || cs.String() == "" || cc.String() == "" {
		t.Error("CSTS")
	}
	var c CRTO
	c.setCRWMT(10)
	c.setCRIMT(20)
	if c != 0x0014000A || c.CRWMT() != 10 || c.CRIMT() != 20 {
		t.Errorf("CRTO %#x", uint32(c))
	}
	for off, size := range map[uint32]int{PropCAP: 8, PropVS: 4, PropCC: 4, PropCSTS: 4, propNSSR: 4, PropCRTO: 4, PropASQ: 8, PropACQ: 8} {
		if PropertySize(off) != size {
			t.Errorf("PropertySize(%#x) = %d", off, PropertySize(off))
		}
	}
}

func TestSizes(t *testing.T) {
	if IOCCSZ(4096) != 260 || IOCCSZ(0) != 4 || IOCCSZ(-1) != 4 || InlineDataSize(260) != 4096 || InlineDataSize(3) != 0 ||
		IOCCSZ(NvmetMaxInlineDataSize) != 1028 {
		t.Error("IOCCSZ")
	}
}

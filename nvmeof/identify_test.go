package nvmeof

import (
	"errors"
	"strings"
	"testing"
)

// Field offsets hand-checked against NVMe Base 2.0 Figure 275 and
// include/linux/nvme.h struct nvme_id_ctrl.
func TestIdentifyControllerLayout(t *testing.T) {
	var c IdentifyController
	c.setVID(0x1234)
	c.SetSN("SN1")
	c.SetMN(strings.Repeat("M", 50)) // truncated to 40
	c.SetFR("1.0")
	c.setIEEE(0xABCDEF)
	c.SetCNTLID(0x0102)
	c.SetVER(vs1_4)
	c.SetOAES(AECNSAttr)
	c.SetCTRATT(CTRATTHostID128)
	c.SetCNTRLTYPE(CntrlTypeIO)
	c.setFGUID([16]byte{1, 2})
	c.setCRDT1(1)
	c.setCRDT3(3)
	c.setOACS(0x0102)
	c.SetKAS(10)
	c.setTNVMCAP(Uint128{Lo: 1, Hi: 2})
	c.SetANAGRPMAX(5)
	c.SetSQES(0x66)
	c.SetMAXCMD(128)
	c.SetNN(0x01020304)
	c.SetONCS(ONCSDSM | ONCSWriteZeroes)
	c.SetVWC(VWCPresent)
	c.SetSGLS(sglsNvmet)
	c.SetMNAN(7)
	c.SetSUBNQN("nqn.2014-08.org.example:s")
	c.SetIOCCSZ(260)
	c.SetIORCSZ(1)
	c.SetICDOFF(0)
	c.setFCATT(fcattStatic)
	c.SetMSDBD(1)
	c.setOFCS(ofcsDisconnect)
	c.setDCTYPE(dcTypeCDC)
	c.PSD(31).setACTP(0xBEEF)
	for _, tc := range []struct {
		off  int
		want string
	}{
		{0, "3412"},
		{4, hexs([]byte("SN1                 "))},
		{24, hexs([]byte(strings.Repeat("M", 40)))},
		{64, hexs([]byte("1.0     "))},
		{73, "efcdab"},
		{78, "0201"},
		{80, "00040100"},
		{92, "00010000"},
		{96, "01000000"},
		{111, "01"},
		{112, "0102"},
		{128, "0100000003"},
		{256, "0201"},
		{280, "01000000000000000200000000000000"},
		{320, "0a00"},
		{344, "05000000"},
		{512, "66"},
		{514, "800004030201"},
		{520, "0c00"},
		{525, "01"},
		{536, "0500100007000000"},
		{768, hexs([]byte("nqn.2014-08.org.example:s\x00"))},
		{1792, "04010000010000000000010101000200"},
		{2048 + 31*32 + 20, "efbe"},
	} {
		if got := hexs(c[tc.off : tc.off+len(tc.want)/2]); got != tc.want {
			t.Errorf("offset %d: %s, want %s", tc.off, got, tc.want)
		}
	}
	if c.MN() != strings.Repeat("M", 40) || c.SN() != "SN1" || c.ieee() != 0xABCDEF || c.tnvmcap() != (Uint128{1, 2}) {
		t.Error("getters")
	}
	if c.PSD(32) != nil || c.PSD(-1) != nil || len(c.vendorSpecific()) != 1024 {
		t.Error("PSD range")
	}
	if _, err := ParseIdentifyController(make([]byte, 4095)); !errors.Is(err, ErrTruncated) {
		t.Error("short identify controller")
	}
	if !strings.Contains(c.String(), "CNTLID 0x102") {
		t.Error(c.String())
	}
}

func TestIdentifyControllerCheckFabrics(t *testing.T) {
	base := func() *IdentifyController {
		var c IdentifyController
		c.SetCNTLID(1)
		c.SetCNTRLTYPE(CntrlTypeIO)
		c.SetKAS(10)
		c.SetIOCCSZ(4)
		c.SetIORCSZ(1)
		c.SetSGLS(SGLSSupported | SGLSKeyed)
		c.SetSUBNQN("nqn.2014-08.org.example:s")
		return &c
	}
	if err := base().CheckFabrics(1, false); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(c *IdentifyController){
		"KAS 0":     func(c *IdentifyController) { c.SetKAS(0) },
		"IOCCSZ 3":  func(c *IdentifyController) { c.SetIOCCSZ(3) },
		"IORCSZ 0":  func(c *IdentifyController) { c.SetIORCSZ(0) },
		"ICDOFF 1":  func(c *IdentifyController) { c.SetICDOFF(1) },
		"no keyed":  func(c *IdentifyController) { c.SetSGLS(SGLSSupported) },
		"CNTLID 2":  func(c *IdentifyController) { c.SetCNTLID(2) },
		"not discv": func(c *IdentifyController) {},
	} {
		c := base()
		mut(c)
		if err := c.CheckFabrics(1, name == "not discv"); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// NVMe/TCP has no keyed SGLs: nvmet-tcp reports SGLS 0x100001 (Linux
	// 6.1 and 6.12), which the TCP check accepts and the RDMA one refuses.
	tc := base()
	tc.SetSGLS(0x100001)
	if err := tc.CheckFabricsTransport(1, false, TrTypeTCP); err != nil {
		t.Errorf("nvmet-tcp's SGLS over TCP: %v", err)
	}
	if err := tc.CheckFabricsTransport(1, false, TrTypeRDMA); !errors.Is(err, ErrMalformed) {
		t.Errorf("no keyed SGLs over RDMA: %v", err)
	}
	tc.SetICDOFF(1)
	if err := tc.CheckFabricsTransport(1, false, TrTypeTCP); !errors.Is(err, ErrMalformed) {
		t.Errorf("ICDOFF 1 over TCP: %v", err)
	}
	// Discovery controllers are recognised by type or by NQN and need no KAS.
	c := base()
	c.SetKAS(0)
	c.SetCNTRLTYPE(0)
	c.SetSUBNQN(DiscoveryNQN)
	if err := c.CheckFabrics(1, true); err != nil {
		t.Error(err)
	}
	c.SetSGLS(SGLSKeyed)
	if c.InlineDataSize() != 0 || c.MaxTransferSize() != 0 {
		t.Error("no in-capsule, no MDTS")
	}
	c.SetMDTS(40)
	if c.MaxTransferSize() != 1<<42 {
		t.Error("MDTS clamp")
	}
}

func TestIdentifyNamespaceLayout(t *testing.T) {
	var n IdentifyNamespace
	n.SetNSZE(0x0102030405060708)
	n.SetNCAP(2)
	n.SetNUSE(3)
	n.SetNSFEAT(NSFEATOptimalIO)
	n.SetNLBAF(19)
	n.SetDLFEAT(DLFEATReadZeroes | DLFEATWriteZeroesDeac)
	n.SetNMIC(NMICShared)
	n.setNVMCAP(U128(512))
	n.SetNPWG(7)
	n.SetNPWA(7)
	n.SetNPDG(7)
	n.SetNPDA(7)
	n.SetNOWS(31)
	n.SetANAGRPID(9)
	n.SetNSATTR(NSATTRWriteProtected)
	n.SetNGUID([16]byte{0xA0, 15: 0xAF})
	n.SetEUI64([8]byte{0xE0, 7: 0xE7})
	n.SetLBAF(0, LBAFormat{LBADS: 9})
	n.SetLBAF(18, LBAFormat{MS: 8, LBADS: 12, RP: 6}) // RP keeps 2 bits
	n.setFormatIndex(18)
	for _, tc := range []struct {
		off  int
		want string
	}{
		{0, "0807060504030201" + "0200000000000000" + "0300000000000000"},
		{24, "1013"},
		{26, "22"}, // index 18 = 0x12: low nibble 2, index bits 5..4 in FLBAS bits 6..5
		{30, "01"},
		{33, "09"},
		{48, "0002"},
		{64, "07000700070007001f00"},
		{92, "09000000"},
		{99, "01"},
		{104, "a00000000000000000000000000000af" + "e0000000000000e7"},
		{128, "00000900"},
		{128 + 4*18, "08000c02"},
	} {
		if got := hexs(n[tc.off : tc.off+len(tc.want)/2]); got != tc.want {
			t.Errorf("offset %d: %s, want %s", tc.off, got, tc.want)
		}
	}
	if n.FormatIndex() != 18 || n.blockSize() != 4096 || n.LBAF(18).RP != 2 || n.LBAF(64) != (LBAFormat{}) {
		t.Errorf("format index %d block %d", n.FormatIndex(), n.blockSize())
	}
	n.SetLBAF(64, LBAFormat{LBADS: 9}) // ignored
	if (LBAFormat{LBADS: 8}).BlockSize() != 0 || (LBAFormat{LBADS: 32}).BlockSize() != 0 {
		t.Error("BlockSize bounds")
	}

	var ind IdentifyNSIndependent
	ind.SetNMIC(NMICShared)
	ind.SetANAGRPID(0x01020304)
	ind.SetNSATTR(1)
	ind.setNVMSETID(5)
	ind.setENDGID(6)
	ind.SetNSTAT(NSTATReady)
	if got := hexs(ind[:15]); got != "000100000403020101000500060001" {
		t.Errorf("CNS 8 layout %s", got)
	}
	if ind.NSTAT()&NSTATReady == 0 {
		t.Error("NSTAT")
	}

	var cn IdentifyControllerNVM
	cn.setWZSL(3)
	cn.setDMRSL(0x11)
	cn.setDMSL(0x22)
	if hexs(cn[:16]) != "0003000011000000"+"2200000000000000" {
		t.Errorf("CNS 6 layout %x", cn[:16])
	}
	var nn IdentifyNamespaceNVM
	nn.setLBSTM(1)
	nn.setPIC(2)
	nn.setELBAF(63, 0xAABBCCDD)
	if nn.elbaf(63) != 0xAABBCCDD || le.Uint32(nn[12+4*63:]) != 0xAABBCCDD || nn.elbaf(64) != 0 || nn[8] != 2 {
		t.Error("CNS 5 layout")
	}
	nn.setELBAF(-1, 1)
	for _, f := range []func([]byte) error{
		func(b []byte) error { _, err := ParseIdentifyNamespace(b); return err },
		func(b []byte) error { _, err := ParseIdentifyNSIndependent(b); return err },
		func(b []byte) error { _, err := ParseIdentifyControllerNVM(b); return err },
		func(b []byte) error { _, err := ParseIdentifyNamespaceNVM(b); return err },
	} {
		if !errors.Is(f(make([]byte, 4095)), ErrTruncated) || f(make([]byte, 4096)) != nil {
			t.Error("identify parse length")
		}
	}
}

func TestNSList(t *testing.T) {
	var buf [IdentifyDataSize]byte
	ids := make([]uint32, 0, 2000)
	for i := uint32(1); i <= 2000; i++ {
		ids = append(ids, i)
	}
	if n := EncodeNSList(buf[:], ids, 0); n != MaxNSListEntries {
		t.Errorf("full list %d", n)
	}
	got, err := ParseNSList(buf[:], nil)
	if err != nil || len(got) != 1024 || got[1023] != 1024 {
		t.Fatalf("%d %v", len(got), err)
	}
	// The host asks again from the last NSID.
	if n := EncodeNSList(buf[:], ids, 1024); n != 976 {
		t.Errorf("second page %d", n)
	}
	got, _ = ParseNSList(buf[:], got[:0])
	if got[0] != 1025 || len(got) != 976 {
		t.Errorf("second page %v", got[:2])
	}
	if EncodeNSList(buf[:], []uint32{0, 5, NSIDAll}, 0) != 1 {
		t.Error("0 and 0xFFFFFFFF must be skipped")
	}
	for _, bad := range [][]uint32{{5, 5}, {5, 3}, {NSIDAll}} {
		clear(buf[:])
		for i, id := range bad {
			le.PutUint32(buf[4*i:], id)
		}
		if _, err := ParseNSList(buf[:], nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestNSDescriptors(t *testing.T) {
	ids := NSIdentifiers{
		EUI64: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, HasEUI64: true,
		NGUID: [16]byte{0x10, 15: 0x1F}, HasNGUID: true,
		UUID: [16]byte{0x20, 15: 0x2F}, HasUUID: true,
		CSI: CSIZNS, HasCSI: true,
	}
	var buf [IdentifyDataSize]byte
	buf[100] = 0xFF // stale data is cleared
	n, err := EncodeNSDescriptors(buf[:], ids)
	if err != nil || n != 12+20+20+5 {
		t.Fatalf("%d %v", n, err)
	}
	if got := hexs(buf[:n]); got != "01080000"+"0102030405060708"+"02100000"+"10000000000000000000000000000000"[:30]+"1f"+
		"03100000"+"20000000000000000000000000000000"[:30]+"2f"+"0401000002" {
		t.Errorf("descriptors %s", got)
	}
	got, err := ParseNSDescriptors(buf[:])
	if err != nil || got != ids {
		t.Errorf("%+v %v", got, err)
	}
	if _, err := EncodeNSDescriptors(make([]byte, 20), ids); !errors.Is(err, ErrTruncated) {
		t.Errorf("small buffer: %v", err)
	}
	// Unknown types are skipped; a known type with a bad length is an error.
	clear(buf[:])
	copy(buf[:], []byte{0x7E, 2, 0, 0, 9, 9, 0x04, 1, 0, 0, 0})
	if got, err := ParseNSDescriptors(buf[:]); err != nil || !got.HasCSI || got.HasUUID {
		t.Errorf("unknown type: %+v %v", got, err)
	}
	for _, bad := range [][]byte{{NIDTUUID, 8, 0, 0}, {NIDTEUI64, 16, 0, 0}, {NIDTCSI, 2, 0, 0}, {NIDTNGUID, 1, 0, 0}} {
		clear(buf[:])
		copy(buf[:], bad)
		if _, err := ParseNSDescriptors(buf[:]); !errors.Is(err, ErrMalformed) {
			t.Errorf("%x accepted", bad)
		}
	}
	// chain fills buf with unknown descriptors from 0 up to offset end.
	chain := func(end int) {
		clear(buf[:])
		pos := 0
		for end-pos > 255+4 {
			buf[pos], buf[pos+1] = 0x7E, 251
			pos += 255
		}
		buf[pos], buf[pos+1] = 0x7E, uint8(end-pos-4)
	}
	// A descriptor running past the end of the 4096 bytes.
	chain(4090)
	buf[4090], buf[4091] = 0x7E, 2
	if _, err := ParseNSDescriptors(buf[:]); err != nil {
		t.Errorf("descriptor ending at 4096: %v", err)
	}
	buf[4091] = 10
	if _, err := ParseNSDescriptors(buf[:]); !errors.Is(err, ErrMalformed) {
		t.Errorf("overrun: %v", err)
	}
	// A partial header at the very end that is not padding.
	chain(4093)
	if _, err := ParseNSDescriptors(buf[:]); err != nil {
		t.Errorf("zero tail: %v", err)
	}
	buf[4094] = 1
	if _, err := ParseNSDescriptors(buf[:]); !errors.Is(err, ErrMalformed) {
		t.Errorf("partial header: %v", err)
	}
}

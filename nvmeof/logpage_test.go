package nvmeof

import (
	"bytes"
	"errors"
	"testing"
)

func TestErrorLogEntryLayout(t *testing.T) {
	var e ErrorLogEntry
	e.SetErrorCount(0x0102030405060708)
	e.SetSQID(1)
	e.SetCID(0x1234)
	e.SetStatus(StatusLBAOutOfRange | StatusDNR)
	e.SetParamErrorLocation(0xFFFF)
	e.SetLBA(0x10)
	e.SetNSID(1)
	e.setVSInfo(2)
	e.setTRTYPE(TrTypeRDMA)
	e.setCommandSpecific(3)
	e.setTransportSpecific(4)
	want := "0807060504030201" + "0100" + "3412" + "0081" + "ffff" + "1000000000000000" + "01000000" + "02" + "01" + "0000" +
		"0300000000000000" + "0400"
	if got := hexs(e[:42]); got != want {
		t.Errorf("error log entry\n got %s\nwant %s", got, want)
	}
	if e.Status() != StatusLBAOutOfRange|StatusDNR || e.StatusField() != 0x8100 {
		t.Errorf("status %v", e.Status())
	}
	if _, err := ParseErrorLogEntry(e[:63]); !errors.Is(err, ErrTruncated) {
		t.Error("short entry")
	}
}

func TestSMARTLogLayout(t *testing.T) {
	var l SMARTLog
	l.SetCriticalWarning(SMARTCritSpare | SMARTCritReadOnly)
	l.SetCompositeTemperature(300)
	l.SetAvailableSpare(100)
	l.SetAvailableSpareThreshold(10)
	l.SetPercentageUsed(255)
	l.setEnduranceGroupCriticalWarning(1)
	l.SetDataUnitsRead(Uint128{Lo: 1, Hi: 2})
	l.SetDataUnitsWritten(U128(3))
	l.SetHostReadCommands(U128(4))
	l.SetHostWriteCommands(U128(5))
	l.SetControllerBusyTime(U128(6))
	l.SetPowerCycles(U128(7))
	l.SetPowerOnHours(U128(8))
	l.SetUnsafeShutdowns(U128(9))
	l.SetMediaErrors(U128(10))
	l.SetErrorLogEntries(U128(11))
	l.setWarningTempTime(12)
	l.setCriticalTempTime(13)
	l.setTempSensor(1, 0x111)
	l.setTempSensor(8, 0x888)
	l.setTempSensor(9, 1) // ignored
	l.setTMT1TransitionCount(14)
	l.setTMT2TransitionCount(15)
	l.setTMT1TotalTime(16)
	l.setTMT2TotalTime(17)
	for _, tc := range []struct {
		off  int
		want string
	}{
		{0, "092c01640aff01"},
		{32, "01000000000000000200000000000000"},
		{48, "03"}, {64, "04"}, {80, "05"}, {96, "06"}, {112, "07"}, {128, "08"}, {144, "09"}, {160, "0a"}, {176, "0b"},
		{192, "0c0000000d000000"},
		{200, "1101"}, {214, "8808"},
		{216, "0e0000000f0000001000000011000000"},
	} {
		if got := hexs(l[tc.off : tc.off+len(tc.want)/2]); got != tc.want {
			t.Errorf("offset %d: %s, want %s", tc.off, got, tc.want)
		}
	}
	if l.tempSensor(8) != 0x888 || l.tempSensor(0) != 0 || l.dataUnitsRead().String() != "36893488147419103233" {
		t.Errorf("getters %v", l.dataUnitsRead())
	}
	if v, ok := l.DataUnitsWritten().uint64(); !ok || v != 3 {
		t.Error("Uint64")
	}
	if _, ok := l.dataUnitsRead().uint64(); ok {
		t.Error("Uint64 overflow not reported")
	}
}

func TestFirmwareSlotLog(t *testing.T) {
	var l FirmwareSlotLog
	l.SetAFI(0x11)
	l.SetFRS(1, "1.0")
	l.SetFRS(7, "12345678")
	l.SetFRS(8, "x") // ignored
	if hexs(l[:24]) != "1100000000000000"+hexs([]byte("1.0     "))+"0000000000000000" || l.frs(7) != "12345678" || l.frs(1) != "1.0" || l.afi() != 0x11 {
		t.Errorf("layout %x", l[:24])
	}
	l.SetFRS(1, "")
	if l.frs(1) != "" || l.frs(0) != "" || hexs(l[8:16]) != "0000000000000000" {
		t.Error("empty slot")
	}
	if _, err := ParseFirmwareSlotLog(l[:511]); err == nil {
		t.Error("short log")
	}
}

func TestChangedNSList(t *testing.T) {
	var buf [ChangedNSListSize]byte
	EncodeChangedNSList(buf[:], []uint32{1, 5, 9})
	ids, over, err := ParseChangedNSList(buf[:], nil)
	if err != nil || over || len(ids) != 3 || ids[2] != 9 {
		t.Errorf("%v %v %v", ids, over, err)
	}
	full := make([]uint32, MaxChangedNamespaces)
	for i := range full {
		full[i] = uint32(i + 1)
	}
	EncodeChangedNSList(buf[:], full)
	if ids, over, _ := ParseChangedNSList(buf[:], nil); over || len(ids) != 1024 {
		t.Errorf("1024 entries: %d %v", len(ids), over)
	}
	EncodeChangedNSList(buf[:], append(full, 1025))
	if le.Uint32(buf[:]) != NSIDAll || !bytes.Equal(buf[4:], make([]byte, 4092)) {
		t.Error("overflow encoding")
	}
	if ids, over, err := ParseChangedNSList(buf[:], nil); err != nil || !over || len(ids) != 0 {
		t.Errorf("overflow: %v %v %v", ids, over, err)
	}
	clear(buf[:])
	le.PutUint32(buf[4:], NSIDAll)
	le.PutUint32(buf[0:], 1)
	if _, _, err := ParseChangedNSList(buf[:], nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("0xFFFFFFFF in the middle: %v", err)
	}
}

func TestCommandEffectsLog(t *testing.T) {
	var l CommandEffectsLog
	l.SetACS(AdminIdentify, EffectsCSUPP)
	l.SetIOCS(NVMWrite, EffectsCSUPP|EffectsLBCC)
	l.SetIOCS(0xFF, 1)
	if le.Uint32(l[24:]) != 1 || le.Uint32(l[1028:]) != 3 || le.Uint32(l[1024+4*255:]) != 1 || l.IOCS(NVMWrite) != 3 || l.ACS(AdminIdentify) != 1 {
		t.Error("effects layout")
	}
}

func TestCopyLogPage(t *testing.T) {
	page := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	dst := []byte{9, 9, 9, 9, 9, 9}
	if err := CopyLogPage(dst, page, 4); err != nil || !bytes.Equal(dst, []byte{5, 6, 7, 8, 0, 0}) {
		t.Errorf("%v %v", dst, err)
	}
	if err := CopyLogPage(dst, page, 8); err != nil || !bytes.Equal(dst, make([]byte, 6)) {
		t.Errorf("at end: %v %v", dst, err)
	}
	if err := CopyLogPage(dst, page, 9); StatusFromError(err) != StatusInvalidField|StatusDNR {
		t.Errorf("beyond end: %v", err)
	}
}

func TestANALog(t *testing.T) {
	groups := []ANAGroup{
		{ID: 1, ChangeCount: 5, State: ANAOptimized, NSIDs: []uint32{1, 2}},
		{ID: 2, ChangeCount: 6, State: ANAInaccessible},
		{ID: 3, State: ANAChange, NSIDs: []uint32{7}},
	}
	b, err := AppendANALog([]byte{0xEE}, 9, groups, false)
	if err != nil {
		t.Fatal(err)
	}
	b = b[1:]
	want := "0900000000000000" + "0300" + "000000000000" +
		"01000000" + "02000000" + "0500000000000000" + "01" + "000000000000000000000000000000" + "0100000002000000" +
		"02000000" + "00000000" + "0600000000000000" + "03" + "000000000000000000000000000000" +
		"03000000" + "01000000" + "0000000000000000" + "0f" + "000000000000000000000000000000" + "07000000"
	if got := hexs(b); got != want {
		t.Errorf("ANA log\n got %s\nwant %s", got, want)
	}
	if len(b) != ANALogSize(groups, false) {
		t.Error("ANALogSize")
	}
	l, err := ParseANALog(b)
	if err != nil || l.ChangeCount != 9 || len(l.Groups) != 3 || l.Groups[0].NSIDs[1] != 2 || l.Groups[1].NSIDs != nil || l.Groups[2].State != ANAChange {
		t.Errorf("%+v %v", l, err)
	}
	rgo, _ := AppendANALog(nil, 9, groups, true)
	if len(rgo) != ANALogSize(groups, true) || len(rgo) != 16+3*32 {
		t.Errorf("RGO size %d", len(rgo))
	}
	if l, err := ParseANALog(rgo); err != nil || len(l.Groups[0].NSIDs) != 0 {
		t.Errorf("RGO parse %+v %v", l, err)
	}
	b[16+16] = 0x05 // invalid state
	if _, err := ParseANALog(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad state: %v", err)
	}
	if _, err := AppendANALog(nil, 0, make([]ANAGroup, 0x10000), false); err == nil {
		t.Error("65536 groups accepted")
	}
	// Huge counts must not allocate before the bounds check.
	huge := make([]byte, 48)
	le.PutUint16(huge[8:], 1)
	le.PutUint32(huge[20:], 0xFFFFFFFF)
	huge[32] = uint8(ANAOptimized)
	if _, err := ParseANALog(huge); !errors.Is(err, ErrTruncated) {
		t.Errorf("huge NNSIDS: %v", err)
	}
	if ANAState(9).String() != "invalid state 0x9" || ANANonOptimized.String() != "non-optimized" || ANAPersistentLoss.String() != "persistent-loss" {
		t.Error("ANAState.String")
	}
}

func TestDiscoveryLogEncode(t *testing.T) {
	e := DiscoveryEntry{TrType: TrTypeRDMA, AdrFam: AdrFamIPv6, SubType: SubTypeNVMe, TReq: TREQNotRequired,
		PortID: 2, CntlID: CNTLIDDynamic, ASQSZ: DiscoveryASQSZ, EFlags: EFLAGSEPCSD, TrSvcID: "4420",
		SubNQN: "nqn.2014-08.org.example:a", TrAddr: "fe80::1", RDMAQPType: RDMAQPTypeRC,
		RDMAPRType: RDMAPRTypeIWARP, RDMACMS: RDMACMSRDMACM, RDMAPKey: 0x1234}
	b, err := AppendDiscoveryLog(nil, 7, []DiscoveryEntry{e, e})
	if err != nil || len(b) != DiscoveryLogSize(2) {
		t.Fatal(err)
	}
	ent := b[1024:2048]
	for _, tc := range []struct {
		off  int
		want string
	}{
		{0, "0102020202" + "00ffff2000" + "0200"},
		{32, hexs([]byte("4420\x00"))},
		{256, hexs([]byte("nqn.2014-08.org.example:a\x00"))},
		{512, hexs([]byte("fe80::1\x00"))},
		{768, "01050100000000003412"},
	} {
		if got := hexs(ent[tc.off : tc.off+len(tc.want)/2]); got != tc.want {
			t.Errorf("entry offset %d: %s, want %s", tc.off, got, tc.want)
		}
	}
	l, err := ParseDiscoveryLog(b)
	if err != nil || l.GenCtr != 7 || l.NumRec != 2 || l.Entries[1] != e {
		t.Errorf("%+v %v", l, err)
	}
	var h DiscoveryLogHeader
	copy(h[:], b)
	if h.genctr() != 7 || h.numrec() != 2 || h.recfmt() != 0 {
		t.Error("header view")
	}
	h.SetRECFMT(1)
	if _, _, err := ParseDiscoveryLogHeader(h[:]); !errors.Is(err, ErrMalformed) {
		t.Error("RECFMT 1 accepted")
	}
	// Space-padded strings (older targets) are trimmed.
	pe, _ := ParseDiscoveryLogEntry(ent)
	copy(pe[32:64], "4420                            ")
	if pe.TRSVCID() != "4420" {
		t.Errorf("%q", pe.TRSVCID())
	}
	for _, bad := range []DiscoveryEntry{{TrSvcID: string(make([]byte, 32))}, {SubNQN: string(make([]byte, 256))}, {TrAddr: string(make([]byte, 256))}} {
		if _, err := AppendDiscoveryLog(nil, 0, []DiscoveryEntry{bad}); err == nil {
			t.Error("long field accepted")
		}
	}
	// A log claiming more records than present.
	le.PutUint64(b[8:], 3)
	if _, err := ParseDiscoveryLog(b); !errors.Is(err, ErrTruncated) {
		t.Errorf("NUMREC 3 with 2 entries: %v", err)
	}
	le.PutUint64(b[8:], ^uint64(0))
	if _, err := ParseDiscoveryLog(b); !errors.Is(err, ErrTruncated) {
		t.Errorf("NUMREC max: %v", err)
	}
	if _, err := ParseDiscoveryLogEntries(make([]byte, 1000), nil); !errors.Is(err, ErrTruncated) {
		t.Error("partial entry accepted")
	}
	if DiscoveryLogEntryOffset(3) != 4096 {
		t.Error("entry offset")
	}
}

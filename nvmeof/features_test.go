package nvmeof

import (
	"errors"
	"testing"
)

func TestFeatureValues(t *testing.T) {
	if v := EncodeNumQueues(4, 8); v != 0x00070003 {
		t.Errorf("num queues %#x", v)
	}
	if nsq, ncq := DecodeNumQueues(0xFFFF0000); nsq != 1 || ncq != 65536 {
		t.Errorf("decode %d %d", nsq, ncq)
	}
	a := Arbitration{AB: 7, LPW: 1, MPW: 2, HPW: 3}
	if a.Encode() != 0x03020107 || DecodeArbitration(0x03020107) != a {
		t.Errorf("arbitration %#x", a.Encode())
	}
	p := PowerManagement{PS: 31, WH: 7}
	if p.Encode() != 0xFF || DecodePowerManagement(0xFF) != p {
		t.Errorf("power %#x", p.Encode())
	}
	tt := TemperatureThreshold{TMPTH: 350, TMPSEL: 0xF, THSEL: thselUnder}
	if tt.Encode() != 0x001F015E || DecodeTemperatureThreshold(0x001F015E) != tt {
		t.Errorf("temperature %#x", tt.Encode())
	}
	er := ErrorRecovery{TLER: 20, DULBE: true}
	if er.Encode() != 0x10014 || DecodeErrorRecovery(0x10014) != er {
		t.Errorf("error recovery %#x", er.Encode())
	}
	ic := IRQCoalescing{THR: 1, TIME: 2}
	if ic.Encode() != 0x0201 || DecodeIRQCoalescing(0x0201) != ic {
		t.Errorf("irq coalescing %#x", ic.Encode())
	}
	if AECLinuxHostMask != 0x80000B00 || aecSMARTMask != 0xFF {
		t.Errorf("AEC mask %#x", AECLinuxHostMask)
	}
}

func TestTimestamp(t *testing.T) {
	var b [8]byte
	if err := EncodeTimestamp(b[:], 0x0000A1B2C3D4E5F6, 1, true); err != nil {
		t.Fatal(err)
	}
	if hexs(b[:]) != "f6e5d4c3b2a10300" {
		t.Errorf("%x", b)
	}
	ms, origin, synch, err := DecodeTimestamp(b[:])
	if err != nil || ms != 0xA1B2C3D4E5F6 || origin != 1 || !synch {
		t.Errorf("%x %d %v %v", ms, origin, synch, err)
	}
	if EncodeTimestamp(b[:], 1<<48, 0, false) == nil {
		t.Error("49-bit timestamp accepted")
	}
	if _, _, _, err := DecodeTimestamp(b[:7]); !errors.Is(err, ErrTruncated) {
		t.Error("short timestamp")
	}
	if EncodeTimestamp(b[:7], 0, 0, false) == nil {
		t.Error("short buffer")
	}
}

func TestHostBehavior(t *testing.T) {
	var h HostBehavior
	h.setACRE(1)
	h.setETDAS(1)
	h.setLBAFEE(1)
	if hexs(h[:4]) != "01010100" || h.acre() != 1 {
		t.Error("host behavior")
	}
	if _, err := ParseHostBehavior(h[:511]); err == nil {
		t.Error("short")
	}
}

func TestAEN(t *testing.T) {
	if AENNSAttrChanged != 0x00040002 || AENANAChange != 0x000C0302 || AENDiscoveryChanged != 0x0070F002 {
		t.Errorf("%#x %#x %#x", uint32(AENNSAttrChanged), uint32(AENANAChange), uint32(AENDiscoveryChanged))
	}
	a := NewAEN(aerTypeSMART, aerSMARTTemperature, LIDSMART)
	if a.Type() != aerTypeSMART || a.Info() != 1 || a.LID() != LIDSMART {
		t.Error("AEN fields")
	}
}

func TestDSMRanges(t *testing.T) {
	b := make([]byte, 3*16)
	l, err := ParseDSMRanges(b, 3)
	if err != nil || l.Len() != 3 {
		t.Fatal(err)
	}
	r := l.At(2)
	r.setContextAttributes(1)
	r.SetNLB(0x100)
	r.SetSLBA(0x1122334455)
	if hexs(b[32:]) != "01000000"+"00010000"+"5544332211000000" || r.NLB() != 0x100 || r.SLBA() != 0x1122334455 || r.contextAttributes() != 1 {
		t.Errorf("range layout %x", b[32:])
	}
	if _, err := ParseDSMRanges(b[:47], 3); StatusFromError(err) != StatusSGLInvalidData|StatusDNR || !errors.Is(err, ErrTruncated) {
		t.Errorf("short ranges: %v", err)
	}
	for _, n := range []int{0, 257} {
		if _, err := ParseDSMRanges(make([]byte, 8192), n); StatusFromError(err) != StatusInvalidField|StatusDNR {
			t.Errorf("%d ranges: %v", n, err)
		}
	}
}

func FuzzDSMRanges(f *testing.F) {
	f.Add(make([]byte, 16), uint8(0))
	f.Add(make([]byte, 64), uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, nr uint8) {
		var s SQE
		s.BuildDSM(1, int(nr)+1, DSMAD)
		l, err := ParseDSMRanges(b, s.DSMCmd().NumRanges())
		if err != nil {
			if len(b) >= s.DSMCmd().DataLength() {
				t.Fatalf("rejected %d bytes for %d ranges: %v", len(b), int(nr)+1, err)
			}
			return
		}
		var sum uint64
		for i := 0; i < l.Len(); i++ {
			sum += l.At(i).SLBA() + uint64(l.At(i).NLB())
		}
		_ = sum
	})
}

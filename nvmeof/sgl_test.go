package nvmeof

import (
	"errors"
	"testing"
)

func TestSGLLayout(t *testing.T) {
	var s SGL
	s.SetKeyed(0x1122334455667788, 0xABCDEF, 0x01020304, true)
	if got := hexs(s[:]); got != "8877665544332211"+"efcdab"+"04030201"+"4f" {
		t.Errorf("keyed %s", got)
	}
	if s.Type() != SGLTypeKeyedDataBlock || s.Subtype() != SGLSubtypeInvalidate || s.Length() != 0xABCDEF || s.Key() != 0x01020304 {
		t.Errorf("%+v", s)
	}
	s.SetKeyed(1, MaxKeyedSGLLength+2, 2, false) // length keeps 24 bits
	if s.Identifier() != SGLIDKeyed || s.Length() != 1 {
		t.Errorf("keyed length %d", s.Length())
	}
	s.SetInCapsule(0x10, 0xFFFFFFFF)
	if got := hexs(s[:]); got != "1000000000000000"+"ffffffff"+"000000"+"01" {
		t.Errorf("in-capsule %s", got)
	}
	if s.Length() != 0xFFFFFFFF || s.Address() != 0x10 {
		t.Error("in-capsule fields")
	}
	s.SetNull()
	if got := hexs(s[:]); got != "00000000000000000000000000000040" {
		t.Errorf("null %s", got)
	}
	d, err := s.Decode()
	if err != nil || !d.Null() || d.Kind != SGLKeyed || d.Invalidate {
		t.Errorf("null decode %+v %v", d, err)
	}
	s.SetIdentifier(0x30)
	s.SetLength(7)
	s.SetAddress(9)
	s.SetKey(0) // a last segment descriptor has no key; harmless
	if s.Length() != 7 || s.Address() != 9 || s.Type() != SGLTypeLastSegment {
		t.Error("raw setters")
	}
}

func TestSGLDecode(t *testing.T) {
	for _, tc := range []struct {
		id     uint8
		kind   SGLKind
		status Status
	}{
		{0x40, SGLKeyed, 0},
		{0x4F, SGLKeyed, 0},
		{0x01, SGLInCapsule, 0},
		{0x00, 0, StatusInvalidField | StatusDNR},   // data block, address subtype
		{0x0A, 0, StatusInvalidField | StatusDNR},   // data block, transport subtype
		{0x41, 0, StatusInvalidField | StatusDNR},   // keyed, offset subtype
		{0x4A, 0, StatusInvalidField | StatusDNR},   // keyed, transport subtype
		{0x10, 0, StatusSGLInvalidType | StatusDNR}, // bit bucket
		{0x20, 0, StatusSGLInvalidType | StatusDNR}, // segment
		{0x30, 0, StatusSGLInvalidType | StatusDNR}, // last segment
		{0x5A, 0, StatusSGLInvalidType | StatusDNR}, // transport data block
		{0x60, 0, StatusSGLInvalidType | StatusDNR}, // reserved
		{0xF0, 0, StatusSGLInvalidType | StatusDNR}, // vendor
	} {
		b := make([]byte, 16)
		b[15] = tc.id
		d, err := ParseSGL(b)
		if tc.status == 0 {
			if err != nil || d.Kind != tc.kind {
				t.Errorf("%#x: %+v %v", tc.id, d, err)
			}
			continue
		}
		var se *SGLError
		if !errors.As(err, &se) || se.Status != tc.status || StatusFromError(err) != tc.status || se.Identifier != tc.id {
			t.Errorf("%#x: err %v, want status %v", tc.id, err, tc.status)
		}
	}
	if _, err := ParseSGL(make([]byte, 15)); !errors.Is(err, ErrTruncated) {
		t.Errorf("short SGL: %v", err)
	}
	if SGLType(6).String() != "reserved type 0x6" || SGLTypeSegment.String() != "segment" {
		t.Error("SGLType.String")
	}
}

func TestSGLInCapsuleRules(t *testing.T) {
	d := SGLDesc{Kind: SGLInCapsule, Addr: 0, Length: 4096}
	if err := d.CheckInCapsule(4096); err != nil {
		t.Error(err)
	}
	for _, tc := range []struct {
		addr uint64
		len  uint32
		have int
	}{{0, 4097, 4096}, {1, 4096, 4096}, {^uint64(0), 2, 4096}, {4097, 0, 4096}, {0, 1, -1}} {
		d := SGLDesc{Kind: SGLInCapsule, Addr: tc.addr, Length: tc.len}
		if StatusFromError(d.CheckInCapsule(tc.have)) != StatusSGLInvalidOffset|StatusDNR {
			t.Errorf("%+v in %d accepted", d, tc.have)
		}
	}
	if (SGLDesc{Kind: SGLKeyed, Length: 1 << 20}).CheckInCapsule(0) != nil {
		t.Error("keyed checked against capsule")
	}
	// In-capsule data on a read is refused.
	var s SQE
	s.BuildRead(1, 0, 8)
	s.SGL1().SetInCapsule(0, 4096)
	if _, err := s.DecodeSGL1(); StatusFromError(err) != StatusInvalidField|StatusDNR {
		t.Errorf("in-capsule read: %v", err)
	}
	s.SGL1().SetIdentifier(0x20)
	if _, err := s.DecodeSGL1(); StatusFromError(err) != StatusSGLInvalidType|StatusDNR {
		t.Errorf("segment: %v", err)
	}
}

func FuzzSGL(f *testing.F) {
	for _, name := range []string{"sqe-disc-connect.hex", "sqe-connect-io.hex", "sqe-read-128k.hex", "sqe-flush.hex"} {
		f.Add(loadGolden(f, name)[24:40])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseSGL(b)
		if err != nil {
			if len(b) >= SGLDescSize && StatusFromError(err).DNR() == false {
				t.Fatalf("decode error without DNR status: %v", err)
			}
			return
		}
		_ = d.CheckInCapsule(len(b))
		var s SGL
		switch d.Kind {
		case SGLKeyed:
			s.SetKeyed(d.Addr, d.Length, d.Key, d.Invalidate)
			// Reserved bits are not kept, the decoded fields are.
		case SGLInCapsule:
			s.SetInCapsule(d.Addr, d.Length)
		default:
			t.Fatalf("kind %d", d.Kind)
		}
		d2, err := s.Decode()
		if err != nil || d2 != d {
			t.Fatalf("round trip %+v -> %+v (%v)", d, d2, err)
		}
	})
}

package wire

import (
	"errors"
	"flag"
	"testing"

	"github.com/nvmetd/nvmetd/internal/testing/fuzzseed"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed corpora")

// TestCheckRefuses: every rule of Check, broken once, is a fatal error with
// the FES and FEI a TermReq carries.
func TestCheckRefuses(t *testing.T) {
	dg := Digests{Header: true, Data: true}
	capsule := NewHeader(TypeCapsuleCmd, 0, dg, 512, 0)
	data := NewHeader(TypeH2CData, FlagLastPDU, dg, 4096, 0)
	for _, tc := range []struct {
		name     string
		h        Header
		fromHost bool
		d        Digests
		pda      int
		fes      FES
		fei      uint32
	}{
		{"controller type from host", NewHeader(TypeC2HData, 0, Digests{}, 8, 0), true, Digests{}, 0, FESInvalidHeaderField, 0},
		{"host type from controller", NewHeader(TypeH2CData, 0, Digests{}, 8, 0), false, Digests{}, 0, FESInvalidHeaderField, 0},
		{"unknown type", Header{Type: 0x08, HLen: 24, PLen: 24}, true, Digests{}, 0, FESInvalidHeaderField, 0},
		{"ICReq HLEN", Header{Type: TypeICReq, HLen: 127, PLen: 128}, true, Digests{}, 0, FESInvalidHeaderField, 2},
		{"ICReq PLEN", Header{Type: TypeICReq, HLen: 128, PLen: 4096}, true, Digests{}, 0, FESInvalidHeaderField, 4},
		{"ICReq PDO", Header{Type: TypeICReq, HLen: 128, PDO: 128, PLen: 128}, true, Digests{}, 0, FESInvalidHeaderField, 3},
		{"ICReq digest flag", Header{Type: TypeICReq, Flags: FlagHDGST, HLen: 128, PLen: 128}, true, Digests{}, 0, FESInvalidHeaderField, 1},
		{"TermReq PLEN too long", Header{Type: TypeH2CTermReq, HLen: 24, PLen: 153}, true, Digests{}, 0, FESInvalidHeaderField, 4},
		{"header digest missing", NewHeader(TypeCapsuleCmd, 0, Digests{}, 0, 0), true, dg, 0, FESInvalidHeaderField, 1},
		{"header digest not negotiated", capsule, true, Digests{Data: true}, 0, FESInvalidHeaderField, 1},
		{"data digest not negotiated", capsule, true, Digests{Header: true}, 0, FESInvalidHeaderField, 1},
		{"PLEN inside the header", Header{Type: TypeCapsuleCmd, Flags: FlagHDGST, HLen: 72, PLen: 72}, true, dg, 0, FESInvalidHeaderField, 4},
		{"PDO inside the header", Header{Type: TypeCapsuleCmd, Flags: FlagHDGST | FlagDDGST, HLen: 72, PDO: 72, PLen: 600}, true, dg, 0, FESInvalidHeaderField, 3},
		{"PDO past PLEN", Header{Type: TypeCapsuleCmd, Flags: FlagHDGST | FlagDDGST, HLen: 72, PDO: 200, PLen: 100}, true, dg, 0, FESInvalidHeaderField, 4},
		{"PDO misaligned", capsule, true, dg, 64, FESInvalidHeaderField, 3},
		{"data PDU without data", Header{Type: TypeH2CData, Flags: FlagHDGST, HLen: 24, PLen: 28}, true, dg, 0, FESInvalidHeaderField, 4},
		{"R2T with data", Header{Type: TypeR2T, HLen: 24, PDO: 24, PLen: 64}, false, Digests{}, 0, FESInvalidHeaderField, 4},
		{"CapsuleResp with data", Header{Type: TypeCapsuleResp, HLen: 24, PDO: 24, PLen: 64}, false, Digests{}, 0, FESInvalidHeaderField, 4},
		{"H2CData HLEN", Header{Type: TypeH2CData, Flags: data.Flags, HLen: 28, PDO: data.PDO, PLen: data.PLen}, true, dg, 0, FESInvalidHeaderField, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check(tc.h, tc.fromHost, tc.d, tc.pda)
			var fe *FatalError
			if !errors.As(err, &fe) {
				t.Fatalf("Check(%+v) = %v, want a FatalError", tc.h, err)
			}
			if fe.FES != tc.fes || fe.FEI != tc.fei {
				t.Fatalf("Check(%+v): FES %s FEI %d, want %s %d (%v)", tc.h, fe.FES, fe.FEI, tc.fes, tc.fei, err)
			}
		})
	}
}

// TestNewHeaderCheck: what NewHeader builds, Check accepts with the same
// layout, aligned data included.
func TestNewHeaderCheck(t *testing.T) {
	for _, d := range []Digests{{}, {Header: true}, {Data: true}, {Header: true, Data: true}} {
		for _, pda := range []int{0, 4, 8, 32, 128} {
			for _, typ := range []PDUType{TypeCapsuleCmd, TypeH2CData, TypeC2HData} {
				for _, n := range []uint32{0, 1, 4096} {
					if n == 0 && typ != TypeCapsuleCmd {
						continue
					}
					h := NewHeader(typ, 0, d, n, pda)
					l, err := Check(h, typ.FromHost(), d, pda)
					if err != nil {
						t.Fatalf("%s %+v pda %d len %d: %+v: %v", typ, d, pda, n, h, err)
					}
					if l.DataLen != n || (n > 0 && pda > 4 && int(l.DataOff)%pda != 0) {
						t.Fatalf("%s %+v pda %d len %d: layout %+v", typ, d, pda, n, l)
					}
				}
			}
		}
	}
}

func TestDataHeaderDATAL(t *testing.T) {
	b := make([]byte, 64)
	PutDataHeader(b, NewHeader(TypeH2CData, FlagLastPDU, Digests{}, 16, 0), 7, 1, 0, 15)
	if _, _, err := ParseDataHeader(b, true, Digests{}, 0); err == nil {
		t.Fatal("DATAL 15 with 16 bytes of data accepted")
	}
	PutDataHeader(b, NewHeader(TypeC2HData, FlagSuccess, Digests{}, 16, 0), 7, 0, 0, 16)
	if _, _, err := ParseDataHeader(b, false, Digests{}, 0); err == nil {
		t.Fatal("SUCCESS without LAST_PDU accepted")
	}
	PutDataHeader(b, NewHeader(TypeR2T, 0, Digests{}, 0, 0), 7, 3, 0xFFFFF000, 0x2000)
	if _, _, err := ParseDataHeader(b, false, Digests{}, 0); err == nil {
		t.Fatal("an R2T range past 4 GiB accepted")
	}
}

func TestTermReqRoundTrip(t *testing.T) {
	bad := make([]byte, 200)
	b := AppendTermReq(nil, TypeC2HTermReq, FESInvalidHeaderField, 3, bad)
	if len(b) != MaxTermReqPLen {
		t.Fatalf("TermReq of %d bytes, want the header in error cut to %d", len(b), MaxTermReqPLen)
	}
	p, err := ParseTermReq(b, false)
	if err != nil || p.FES() != FESInvalidHeaderField || p.FEI() != 3 {
		t.Fatalf("%v %v", p, err)
	}
	if _, err := ParseTermReq(b, true); err == nil {
		t.Fatal("a C2HTermReq accepted from a host")
	}
}

// TestTruncatedPrefixes: every decoder refuses every prefix of a valid PDU.
func TestTruncatedPrefixes(t *testing.T) {
	icreq := NewICReq(0, Digests{Header: true}, 0)
	icresp := NewICResp(0, Digests{Header: true}, 131072)
	data := make([]byte, DataHLen)
	PutDataHeader(data, NewHeader(TypeR2T, 0, Digests{}, 0, 0), 1, 1, 0, 4096)
	term := AppendTermReq(nil, TypeH2CTermReq, FESHeaderDigestError, 0, nil)
	for _, tc := range []struct {
		name  string
		valid []byte
		parse func([]byte) error
	}{
		{"Header", icreq[:CommonHeaderSize], func(b []byte) error { _, err := ParseHeader(b); return err }},
		{"ICReq", icreq[:], func(b []byte) error { _, err := ParseICReq(b); return err }},
		{"ICResp", icresp[:], func(b []byte) error { _, err := ParseICResp(b, Digests{Header: true}); return err }},
		{"DataHeader", data, func(b []byte) error { _, _, err := ParseDataHeader(b, false, Digests{}, 0); return err }},
		{"TermReq", term, func(b []byte) error { _, err := ParseTermReq(b, true); return err }},
	} {
		if err := tc.parse(tc.valid); err != nil {
			t.Fatalf("%s: valid input refused: %v", tc.name, err)
		}
		for n := 0; n < len(tc.valid); n++ {
			if err := tc.parse(append([]byte(nil), tc.valid[:n]...)); err == nil {
				t.Fatalf("%s: prefix of %d bytes accepted", tc.name, n)
			}
		}
	}
}

func TestFuzzSeeds(t *testing.T) {
	icreq := NewICReq(0, Digests{Header: true, Data: true}, 0)
	icresp := NewICResp(0, Digests{}, 131072)
	data := make([]byte, 64)
	PutDataHeader(data, NewHeader(TypeH2CData, FlagLastPDU, Digests{}, 40, 0), 1, 1, 0, 40)
	fuzzseed.Sync(t, *update, map[string][][]any{
		"FuzzPDU": {
			{icreq[:], uint8(0)}, {icresp[:], uint8(3)}, {data, uint8(0)},
			{AppendTermReq(nil, TypeC2HTermReq, FESSequenceError, 0, data[:24]), uint8(1)},
		},
	})
}

// FuzzPDU: no byte sequence panics a decoder, and whatever Check accepts
// has a layout inside PLEN.
func FuzzPDU(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte, mode uint8) {
		d := Digests{Header: mode&1 != 0, Data: mode&2 != 0}
		pda := PDA(mode >> 3 & 31)
		fromHost := mode&4 != 0
		ParseICReq(b)
		ParseICResp(b, d)
		ParseTermReq(b, fromHost)
		ParseDataHeader(b, fromHost, d, pda)
		h, err := ParseHeader(b)
		if err != nil {
			return
		}
		l, err := Check(h, fromHost, d, pda)
		if err != nil {
			return
		}
		end := uint64(l.DataOff) + uint64(l.DataLen)
		if l.DDGST {
			end += DigestSize
		}
		if uint64(l.HeaderLen(h)) > uint64(h.PLen) || end > uint64(h.PLen) {
			t.Fatalf("%+v: layout %+v outside PLEN", h, l)
		}
		if l.DataLen > 0 && l.DataOff < uint32(l.HeaderLen(h)) {
			t.Fatalf("%+v: data at %d inside the header", h, l.DataOff)
		}
	})
}

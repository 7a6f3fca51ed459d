package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvmetd/nvmetd/internal/pcapstream"
)

func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMPAGoldenLinux(t *testing.T) {
	nvmeReqPD := mustHex("0000000020001f00000000000000000000000000000000000000000000000000")
	tests := []struct {
		name     string
		file     string
		off      int
		reply    bool
		ird, ord uint16
		pd       []byte
	}{
		{"nvme discover request", "mpa-req-nvme-discover-conn0.bin", 0, false, 128, 0, nvmeReqPD},
		{"nvme connect request", "mpa-req-nvme-connect-conn0.bin", 0, false, 128, 0, nvmeReqPD},
		{"nvmet reply qid0", "mpa-probe-kernel-target-qid0.bin", 56, true, 0, 128,
			mustHex("0000200000000000000000000000000000000000000000000000000000000000")},
		{"nvmet reply qid1", "mpa-probe-kernel-target-qid1.bin", 56, true, 0, 128,
			mustHex("0000800000000000000000000000000000000000000000000000000000000000")},
		{"request qid1", "mpa-probe-kernel-target-qid1.bin", 0, false, 128, 0,
			mustHex("0000010080007f00000000000000000000000000000000000000000000000000")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := readGolden(t, tc.file)[tc.off:]
			f, n, err := ParseMPAFrame(b, SIWMaxPrivateData)
			if err != nil {
				t.Fatal(err)
			}
			if n != 56 {
				t.Errorf("frame length %d, want 56", n)
			}
			if f.Reply != tc.reply || f.Markers || f.CRC || f.Reject || !f.Enhanced || f.Revision != 2 {
				t.Errorf("flags: %+v", f)
			}
			if f.IRD != tc.ird || f.ORD != tc.ord || f.P2P || f.RTR != 0 {
				t.Errorf("IRD/ORD %d/%d p2p %v rtr %v, want %d/%d", f.IRD, f.ORD, f.P2P, f.RTR, tc.ird, tc.ord)
			}
			if !bytes.Equal(f.PrivateData, tc.pd) {
				t.Errorf("private data %x, want %x", f.PrivateData, tc.pd)
			}
			// Re-encoding gives the same bytes.
			if got := f.Append(nil); !bytes.Equal(got, b[:56]) {
				t.Errorf("re-encoded\n%x\nwant\n%x", got, b[:56])
			}
		})
	}
}

func TestMPAEncode(t *testing.T) {
	f := MPAFrame{Enhanced: true, Revision: 2, CRC: true, P2P: true, RTR: RTRWrite | RTRRead, IRD: 16, ORD: 0x3FFF, PrivateData: []byte{1, 2, 3}}
	b := f.Append(nil)
	want := append([]byte(MPAKeyRequest), 0x50, 2, 0, 7, 0x80, 16, 0xFF, 0xFF, 1, 2, 3)
	if !bytes.Equal(b, want) {
		t.Fatalf("got %x want %x", b, want)
	}
	g, n, err := ParseMPAFrame(b, MPAMaxPrivateData)
	if err != nil || n != len(b) {
		t.Fatal(n, err)
	}
	if g.IRD != 16 || g.ORD != 0x3FFF || !g.P2P || g.RTR != RTRWrite|RTRRead || !g.CRC {
		t.Fatalf("decoded %+v", g)
	}
	// Revision 1: no enhanced header even with the flag.
	v1 := MPAFrame{Revision: 1, Reply: true, Reject: true, PrivateData: []byte{9}}
	b = v1.Append(nil)
	if !bytes.Equal(b, append([]byte(MPAKeyReply), 0x20, 1, 0, 1, 9)) {
		t.Fatalf("v1: %x", b)
	}
	if err := (&MPAFrame{Revision: 2, PrivateData: make([]byte, 513)}).Validate(); !errors.Is(err, ErrMPAPrivateDataLen) {
		t.Fatalf("validate: %v", err)
	}
}

func TestMPAParseErrors(t *testing.T) {
	good := readGolden(t, "mpa-req-nvme-connect-conn0.bin")
	for i := 0; i < len(good); i++ {
		if _, _, err := ParseMPAFrame(good[:i], SIWMaxPrivateData); !errors.Is(err, ErrShort) {
			t.Fatalf("prefix %d: err %v, want ErrShort", i, err)
		}
	}
	bad := bytes.Clone(good)
	bad[3] = 'X'
	if _, _, err := ParseMPAFrame(bad, SIWMaxPrivateData); !errors.Is(err, ErrMPAKey) {
		t.Fatalf("bad key: %v", err)
	}
	long := bytes.Clone(good)
	binary.BigEndian.PutUint16(long[18:], 257)
	if _, _, err := ParseMPAFrame(long, SIWMaxPrivateData); !errors.Is(err, ErrMPAPrivateDataLen) {
		t.Fatalf("long PD: %v", err)
	}
	short := append([]byte(MPAKeyRequest), 0x10, 2, 0, 2, 0, 0)
	if _, _, err := ParseMPAFrame(short, SIWMaxPrivateData); !errors.Is(err, ErrMPAEnhanced) {
		t.Fatalf("enhanced without header: %v", err)
	}
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestPadAndLen(t *testing.T) {
	for _, tc := range []struct{ ulpdu, pad, total int }{
		{14, 0, 20}, {18, 0, 24}, {34, 0, 40}, {46, 0, 52}, {114, 0, 120}, {15, 3, 24}, {16, 2, 24}, {17, 1, 24}, {0, 2, 8},
	} {
		if p := PadLen(tc.ulpdu); p != tc.pad {
			t.Errorf("PadLen(%d)=%d want %d", tc.ulpdu, p, tc.pad)
		}
		if n := FPDULen(tc.ulpdu); n != tc.total {
			t.Errorf("FPDULen(%d)=%d want %d", tc.ulpdu, n, tc.total)
		}
	}
}

// TestCRCVector checks CRC-32C and its byte order against the iSCSI test
// vector of RFC 3720 B.4 (32 bytes of zeros: bytes on the wire aa 36 91 8a),
// which uses the same little-endian placement as siw.
func TestCRCVector(t *testing.T) {
	var field [4]byte
	PutCRC(field[:], CRC(make([]byte, 32)))
	if want := []byte{0xaa, 0x36, 0x91, 0x8a}; !bytes.Equal(field[:], want) {
		t.Fatalf("CRC field %x want %x", field, want)
	}
	ones := bytes.Repeat([]byte{0xff}, 32)
	PutCRC(field[:], CRC(ones))
	if want := []byte{0x43, 0xab, 0xa8, 0x62}; !bytes.Equal(field[:], want) {
		t.Fatalf("CRC(ff*32) field %x want %x", field, want)
	}
	if got := CRCUpdate(CRCUpdate(0, ones[:7]), ones[7:]); got != CRC(ones) {
		t.Fatalf("incremental CRC %x != %x", got, CRC(ones))
	}
}

// fpdus splits an FPDU stream into frames.
func fpdus(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 2 {
			t.Fatalf("trailing %d bytes", len(b))
		}
		n := FPDULen(ULPDULength(b))
		if n > len(b) {
			t.Fatalf("FPDU of %d bytes, %d left", n, len(b))
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

type streamStats struct {
	ops  map[Opcode]int
	msn  [NumQN]uint32
	segs int
}

// checkStream decodes every FPDU of a Linux siw stream and checks what the
// protocol requires of it.
func checkStream(t *testing.T, data []byte, st *streamStats) {
	t.Helper()
	var h Header
	var curTagged struct {
		active bool
		stag   uint32
		to     uint64
	}
	for i, f := range fpdus(t, data) {
		n, err := DecodeHeader(f, &h)
		if err != nil {
			t.Fatalf("FPDU %d: %v", i, err)
		}
		if err := h.Check(); err != nil {
			t.Fatalf("FPDU %d: %v", i, err)
		}
		if h.Reserved != 0 {
			t.Errorf("FPDU %d: reserved bits %x", i, h.Reserved)
		}
		st.segs++
		st.ops[h.Opcode]++
		// Pad is zero and, as CRC is off in these captures, so is the CRC field.
		payEnd := FPDULenFieldLen + int(h.ULPDULen)
		if !bytes.Equal(f[payEnd:len(f)-CRCLen], make([]byte, PadLen(int(h.ULPDULen)))) {
			t.Errorf("FPDU %d: pad not zero", i)
		}
		if GetCRC(f[len(f)-CRCLen:]) != 0 {
			t.Errorf("FPDU %d: CRC field %x with CRC off", i, f[len(f)-CRCLen:])
		}
		// Re-encode the header through both encoders.
		var enc [UntaggedHeaderLen]byte
		if m := h.Encode(enc[:]); m != n || !bytes.Equal(enc[:n], f[:n]) {
			t.Errorf("FPDU %d: Encode %x want %x", i, enc[:m], f[:n])
		}
		if h.Tagged {
			PutTaggedHeader(enc[:], h.Opcode, h.Last, h.STag, h.TO, h.PayloadLen())
			if curTagged.active && (h.STag != curTagged.stag || h.TO != curTagged.to) {
				t.Errorf("FPDU %d: tagged continuation STag %x TO %x, want %x %x", i, h.STag, h.TO, curTagged.stag, curTagged.to)
			}
			curTagged.active, curTagged.stag, curTagged.to = !h.Last, h.STag, h.TO+uint64(h.PayloadLen())
		} else {
			PutUntaggedHeader(enc[:], h.Opcode, h.Last, h.STag, h.QN, h.MSN, h.MO, h.PayloadLen())
			if h.QN >= NumQN {
				t.Fatalf("FPDU %d: QN %d", i, h.QN)
			}
			// MSN starts at 1 per queue and advances once per message.
			if h.MO == 0 {
				st.msn[h.QN]++
			}
			if h.MSN != st.msn[h.QN] {
				t.Errorf("FPDU %d: QN %d MSN %d, want %d", i, h.QN, h.MSN, st.msn[h.QN])
			}
			if h.Opcode == OpReadRequest {
				rr, err := DecodeReadRequest(f[n : n+h.PayloadLen()])
				if err != nil || h.PayloadLen() != ReadRequestLen {
					t.Errorf("FPDU %d: read request %d bytes: %v", i, h.PayloadLen(), err)
				}
				var rb [ReadRequestLen]byte
				rr.Encode(rb[:])
				if !bytes.Equal(rb[:], f[n:n+ReadRequestLen]) {
					t.Errorf("FPDU %d: read request re-encode", i)
				}
			}
		}
		if !bytes.Equal(enc[:n], f[:n]) {
			t.Errorf("FPDU %d: Put*Header %x want %x", i, enc[:n], f[:n])
		}
	}
}

func TestLinuxRpingCapture(t *testing.T) {
	conns, err := pcapstream.ReadFile("testdata/rping-siw-3x100B.pcap")
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	c := conns[0]
	if c.Initiator.Gap+c.Responder.Gap != 0 {
		t.Fatalf("golden capture has gaps: %d, %d bytes", c.Initiator.Gap, c.Responder.Gap)
	}
	req, n, err := ParseMPAFrame(c.Initiator.Data, SIWMaxPrivateData)
	if err != nil || req.Reply || req.IRD != 1 || req.ORD != 1 || len(req.PrivateData) != 0 {
		t.Fatalf("request %+v %v", req, err)
	}
	cli := streamStats{ops: map[Opcode]int{}}
	checkStream(t, c.Initiator.Data[n:], &cli)
	rep, n, err := ParseMPAFrame(c.Responder.Data, SIWMaxPrivateData)
	if err != nil || !rep.Reply || rep.IRD != 1 || rep.ORD != 1 {
		t.Fatalf("reply %+v %v", rep, err)
	}
	srv := streamStats{ops: map[Opcode]int{}}
	checkStream(t, c.Responder.Data[n:], &srv)
	// Client per iteration: Send (advertisement), Read Response, Send (go-ahead).
	if cli.ops[OpSend] != 6 || cli.ops[OpReadResponse] != 3 || cli.segs != 9 {
		t.Errorf("client ops %v", cli.ops)
	}
	// Server per iteration: Read Request, Send, Write, Send.
	if srv.ops[OpReadRequest] != 3 || srv.ops[OpSend] != 6 || srv.ops[OpWrite] != 3 {
		t.Errorf("server ops %v", srv.ops)
	}
}

func TestLinuxNVMeoFCaptures(t *testing.T) {
	for _, file := range []string{"kernel-siw-nvmeof-mtu65536.pcap", "kernel-siw-nvmeof-mtu1500.pcap"} {
		t.Run(file, func(t *testing.T) {
			conns, err := pcapstream.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			total := map[Opcode]int{}
			maxFPDU := 0
			for _, c := range conns {
				if c.Initiator.Gap+c.Responder.Gap != 0 {
					t.Fatalf("%v: golden capture has gaps: %d, %d bytes", c.Initiator, c.Initiator.Gap, c.Responder.Gap)
				}
				if len(c.Initiator.Data) == 0 {
					continue
				}
				req, n, err := ParseMPAFrame(c.Initiator.Data, SIWMaxPrivateData)
				if err != nil {
					t.Fatalf("%v: %v", c.Initiator, err)
				}
				if req.IRD != 128 || req.ORD != 0 || len(req.PrivateData) != 32 {
					t.Errorf("%v: request %+v", c.Initiator, req)
				}
				st := streamStats{ops: map[Opcode]int{}}
				checkStream(t, c.Initiator.Data[n:], &st)
				rep, m, err := ParseMPAFrame(c.Responder.Data, SIWMaxPrivateData)
				if err != nil || rep.IRD != 0 || rep.ORD != 128 {
					t.Fatalf("%v: reply %+v %v", c.Responder, rep, err)
				}
				rst := streamStats{ops: map[Opcode]int{}}
				checkStream(t, c.Responder.Data[m:], &rst)
				for op, k := range st.ops {
					total[op] += k
				}
				for op, k := range rst.ops {
					total[op] += k
				}
				for _, f := range append(fpdus(t, c.Initiator.Data[n:]), fpdus(t, c.Responder.Data[m:])...) {
					maxFPDU = max(maxFPDU, len(f))
				}
			}
			for _, op := range []Opcode{OpSend, OpSendInv, OpWrite, OpReadRequest, OpReadResponse} {
				if total[op] == 0 {
					t.Errorf("no %v in capture: %v", op, total)
				}
			}
			if file == "kernel-siw-nvmeof-mtu1500.pcap" && maxFPDU > 1448 {
				t.Errorf("FPDU of %d bytes at MTU 1500", maxFPDU)
			}
			t.Logf("%d connections, ops %v, largest FPDU %d bytes", len(conns), total, maxFPDU)
		})
	}
}

func TestDecodeHeaderShortAndBad(t *testing.T) {
	var full [UntaggedHeaderLen]byte
	PutUntaggedHeader(full[:], OpSend, true, 0, 0, 1, 0, 16)
	var h Header
	for i := 0; i < len(full); i++ {
		need, err := DecodeHeader(full[:i], &h)
		if !errors.Is(err, ErrShort) {
			t.Fatalf("prefix %d: %v", i, err)
		}
		if i < MinHeaderLen && need != MinHeaderLen || i >= MinHeaderLen && need != UntaggedHeaderLen {
			t.Fatalf("prefix %d: need %d", i, need)
		}
	}
	var term *TermError
	bad := full
	bad[3] = 0x48 // opcode 8
	if _, err := DecodeHeader(bad[:], &h); !errors.As(err, &term) || term.Cause != CauseRDMAPUnexpectedOpcode {
		t.Fatalf("opcode 8: %v", err)
	}
	bad = full
	binary.BigEndian.PutUint16(bad[:], 17)
	if _, err := DecodeHeader(bad[:], &h); !errors.As(err, &term) || term.Cause != CauseDDPUntaggedTooLong {
		t.Fatalf("short ULPDU: %v", err)
	}
	checks := []struct {
		mod   func(b []byte)
		cause Cause
	}{
		{func(b []byte) { b[2] = 0x40 }, CauseDDPUntaggedBadVersion},
		{func(b []byte) { b[2] = 0xC2; b[3] = 0x40 }, CauseDDPTaggedBadVersion},
		{func(b []byte) { b[3] = 0x83 }, CauseRDMAPBadVersion},
		{func(b []byte) { b[2] = 0xC1 }, CauseRDMAPUnexpectedOpcode}, // Send with T=1
	}
	for i, c := range checks {
		b := full
		c.mod(b[:])
		if _, err := DecodeHeader(b[:], &h); err != nil {
			t.Fatalf("check %d: decode %v", i, err)
		}
		if err := h.Check(); !errors.As(err, &term) || term.Cause != c.cause {
			t.Errorf("check %d: %v, want %v", i, err, c.cause)
		}
	}
}

func TestTerminate(t *testing.T) {
	var hdr [UntaggedHeaderLen]byte
	PutUntaggedHeader(hdr[:], OpSend, true, 0, 0, 7, 0, 100)
	term := Terminate{Cause: CauseDDPUntaggedMSNRange, SegLenValid: true, DDPHeaderIncluded: true, DDPSegLen: 118, Headers: hdr[2:]}
	p := term.AppendPayload(nil)
	if len(p)%4 != 0 || len(p) != 4+2+DDPUntaggedLen {
		t.Fatalf("payload length %d", len(p))
	}
	if !bytes.Equal(p[:4], []byte{0x12, 0x03, 0xC0, 0}) {
		t.Fatalf("control %x", p[:4])
	}
	got, err := DecodeTerminate(p)
	if err != nil || got.Cause != term.Cause || !got.SegLenValid || !got.DDPHeaderIncluded || got.RDMAPHeaderIncluded ||
		got.DDPSegLen != 118 || !bytes.Equal(got.Headers, hdr[2:]) {
		t.Fatalf("decoded %+v %v", got, err)
	}
	any, siw, err := DecodeTerminateAny(p)
	if err != nil || siw || any.Cause != term.Cause {
		t.Fatalf("any: %+v siw=%v %v", any, siw, err)
	}
	// The same cause as siw writes it on x86: nibbles swapped, M/D in bits 0/1.
	siwBytes := append([]byte{0x21, 0x03, 0x03, 0}, p[4:]...)
	s, isSIW, err := DecodeTerminateAny(siwBytes)
	if err != nil || !isSIW || s.Cause != term.Cause || !s.SegLenValid || !s.DDPHeaderIncluded || s.DDPSegLen != 118 {
		t.Fatalf("siw: %+v siw=%v %v", s, isSIW, err)
	}
	// siw catastrophic terminate with no header: RDMAP/remote op/0x07 = 0x20 0x07 0 0.
	s, isSIW, _ = DecodeTerminateAny([]byte{0x20, 0x07, 0, 0})
	if s.Cause != MakeCause(LayerLLP, 0, 7) || isSIW {
		// Ambiguous by construction: an RFC reading is valid (LLP no matching RTR);
		// we keep the RFC reading when both are plausible.
		t.Fatalf("ambiguous: %v siw=%v", s.Cause, isSIW)
	}
	for i := 0; i < TerminateControlLen; i++ {
		if _, err := DecodeTerminate(p[:i]); !errors.Is(err, ErrShort) {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
	if s := CauseLLPCRC.String(); s != "MPA: CRC error (layer 2 type 0 code 0x02)" {
		t.Fatalf("String: %q", s)
	}
}

func TestHeaderAllocs(t *testing.T) {
	var b [UntaggedHeaderLen]byte
	var h Header
	n := testing.AllocsPerRun(100, func() {
		PutUntaggedHeader(b[:], OpSend, true, 0, 0, 1, 0, 64)
		if _, err := DecodeHeader(b[:], &h); err != nil {
			t.Fatal(err)
		}
		PutTaggedHeader(b[:], OpWrite, true, 0x100, 0x2000, 4096)
		if _, err := DecodeHeader(b[:], &h); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

package wire

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/internal/pcapstream"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// The golden captures: Linux nvme-tcp (host) against Linux nvmet-tcp
// (target) in the lab VM, 6.1 and 6.12, without and with header and data
// digests, and with SQ flow control disabled (testdata/capture/capture.sh;
// nvme connect --disable-sqflow). Each holds an admin queue and one
// I/O queue: connect, a 4 KiB write (in-capsule), a 128 KiB write (R2T and
// H2CData), a 4 KiB and a 128 KiB read (C2HData), a flush, a disconnect.
var goldenCaptures = []struct {
	file    string
	digests Digests
	// sqflowOff: the host disabled SQ flow control (CATTR bit 2 in its
	// Connect commands): every successful read's response is its
	// C2HData's SUCCESS flag, with no CapsuleResp (TCP 1.0 §3.6.2.7).
	sqflowOff bool
}{
	{"linux-6.1.0-plain.pcap", Digests{}, false},
	{"linux-6.1.0-digest.pcap", Digests{Header: true, Data: true}, false},
	{"linux-6.12.117+deb12-plain.pcap", Digests{}, false},
	{"linux-6.12.117+deb12-digest.pcap", Digests{Header: true, Data: true}, false},
	{"linux-6.1.0-sqflow.pcap", Digests{}, true},
	{"linux-6.12.117+deb12-sqflow.pcap", Digests{}, true},
}

// pdu is one PDU of a captured stream.
type pdu struct {
	h    Header
	l    Layout
	raw  []byte // the whole PDU, PLEN bytes
	data []byte
}

// walk splits a stream into PDUs and checks each with the codec as the
// receiver would: the ICReq/ICResp exchange first (no digests), then every
// PDU against the negotiated digests, its header digest and data digest
// verified.
func walk(t *testing.T, s []byte, fromHost bool, d Digests) []pdu {
	t.Helper()
	var out []pdu
	for off := 0; off < len(s); {
		h, err := ParseHeader(s[off:])
		if err != nil {
			t.Fatalf("offset %d: %v", off, err)
		}
		if off+int(h.PLen) > len(s) {
			t.Fatalf("offset %d: %s PLEN %d past the stream's end (%d)", off, h.Type, h.PLen, len(s))
		}
		raw := s[off : off+int(h.PLen)]
		neg := d
		if len(out) == 0 {
			neg = Digests{}
		}
		l, err := Check(h, fromHost, neg, 0)
		if err != nil {
			t.Fatalf("PDU %d (%s at %d): %v", len(out), h.Type, off, err)
		}
		if l.HDGST {
			if err := CheckHeaderDigest(raw, h); err != nil {
				t.Fatalf("PDU %d: %v", len(out), err)
			}
		}
		p := pdu{h: h, l: l, raw: raw, data: raw[l.DataOff : l.DataOff+l.DataLen]}
		if l.DDGST {
			got, want := GetDigest(raw[l.DataOff+l.DataLen:]), DataDigest(0, p.data)
			if got != want {
				t.Fatalf("PDU %d (%s): data digest %#x, computed %#x", len(out), h.Type, got, want)
			}
		}
		out = append(out, p)
		off += int(h.PLen)
	}
	return out
}

func TestGoldenLinux(t *testing.T) {
	for _, gc := range goldenCaptures {
		t.Run(strings.TrimSuffix(gc.file, ".pcap"), func(t *testing.T) {
			conns, err := pcapstream.ReadFile(filepath.Join("testdata", "golden", gc.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(conns) != 2 {
				t.Fatalf("%d connections, want 2 (admin and one I/O queue)", len(conns))
			}
			seen := map[PDUType]int{}
			var sawSuccess, sawLast, sawR2T bool
			successes := 0
			for qi, c := range conns {
				if c.Initiator.Gap != 0 || c.Responder.Gap != 0 {
					t.Fatalf("queue %d: the capture lost bytes", qi)
				}
				host := walk(t, c.Initiator.Data, true, gc.digests)
				ctrl := walk(t, c.Responder.Data, false, gc.digests)
				req, err := ParseICReq(host[0].raw)
				if err != nil {
					t.Fatal(err)
				}
				if req.Digests() != gc.digests || req.PFV() != PFV10 {
					t.Fatalf("ICReq %+v pfv %d", req.Digests(), req.PFV())
				}
				resp, err := ParseICResp(ctrl[0].raw, req.Digests())
				if err != nil {
					t.Fatal(err)
				}
				if resp.Digests() != gc.digests {
					t.Fatalf("ICResp digests %+v", resp.Digests())
				}
				// Our builders make Linux's bytes for the same fields.
				if b := NewICReq(req.HPDA(), req.Digests(), req.MaxR2T()); !bytes.Equal(b[:], host[0].raw) {
					t.Errorf("NewICReq:\n% x\nLinux:\n% x", b[:], host[0].raw)
				}
				if b := NewICResp(resp.CPDA(), resp.Digests(), resp.MaxH2CData()); !bytes.Equal(b[:], ctrl[0].raw) {
					t.Errorf("NewICResp:\n% x\nLinux:\n% x", b[:], ctrl[0].raw)
				}
				for _, side := range [][]pdu{host, ctrl} {
					for _, p := range side[1:] {
						seen[p.h.Type]++
						// Rebuild the common header from the layout.
						h := NewHeader(p.h.Type, p.h.Flags&^(FlagHDGST|FlagDDGST), gc.digests, p.l.DataLen, 0)
						if h != p.h {
							t.Errorf("%s: NewHeader %+v, Linux %+v", p.h.Type, h, p.h)
						}
						switch p.h.Type {
						case TypeCapsuleCmd:
							sqe, err := nvmeof.ParseSQE(p.raw[CommonHeaderSize:])
							if err != nil {
								t.Fatal(err)
							}
							if sqe.IsFabrics() && sqe.FCType() == nvmeof.FCTypeConnect {
								if got := sqe.ConnectCmd().SQFlowControlDisable(); got != gc.sqflowOff {
									t.Errorf("Connect: SQ flow control disabled %v, want %v", got, gc.sqflowOff)
								}
							}
						case TypeH2CData, TypeC2HData, TypeR2T:
							dh, _, err := ParseDataHeader(p.raw, p.h.Type.FromHost(), gc.digests, 0)
							if err != nil {
								t.Fatalf("%s: %v", p.h.Type, err)
							}
							var b [DataHLen]byte
							PutDataHeader(b[:], dh.Header(), dh.CID(), dh.TTag(), dh.Offset(), dh.Length())
							if !bytes.Equal(b[:], p.raw[:DataHLen]) {
								t.Errorf("PutDataHeader:\n% x\nLinux:\n% x", b, p.raw[:DataHLen])
							}
							sawR2T = sawR2T || p.h.Type == TypeR2T
							sawLast = sawLast || p.h.Flags&FlagLastPDU != 0
							if p.h.Flags&FlagSuccess != 0 {
								sawSuccess = true
								successes++
							}
						}
					}
				}
			}
			for _, typ := range []PDUType{TypeCapsuleCmd, TypeCapsuleResp, TypeH2CData, TypeC2HData, TypeR2T} {
				if seen[typ] == 0 {
					t.Errorf("no %s in the capture", typ)
				}
			}
			if !sawR2T || !sawLast {
				t.Errorf("R2T %v LAST_PDU %v", sawR2T, sawLast)
			}
			if sawSuccess != gc.sqflowOff {
				t.Errorf("C2HData with SUCCESS: %v; want %v (SQ flow control disabled: %v)", sawSuccess, gc.sqflowOff, gc.sqflowOff)
			}
			if gc.sqflowOff && successes != seen[TypeC2HData] {
				t.Errorf("%d of %d C2HData with SUCCESS: every read here succeeds with DW0 zero", successes, seen[TypeC2HData])
			}
			t.Logf("PDUs: %v; C2HData with SUCCESS: %v", fmt.Sprint(seen), sawSuccess)
		})
	}
}

package nvmeof

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The golden vectors in testdata/golden were cut out of a real Linux
// capture by this file: with -update it rewrites them from the capture;
// without, TestGoldenFromCapture checks that they still match it. The
// capture lives outside the repository (the lab's ../shared), so the check
// is skipped when it is absent.

var update = flag.Bool("update", false, "rewrite testdata/golden from the lab capture")

const captureName = "kernel-siw-nvmeof-mtu65536.pcap"

var captureDir = filepath.Join("..", "..", "shared", "lab", "captures")

// goldenSource says where one golden file comes from: the payload of the
// DDP/RDMAP message whose last byte arrived in pcap frame Frame (tshark's
// numbering), bytes [Off, Off+Len) of it (Len 0: to the end).
type goldenSource struct {
	File  string
	Frame int
	Op    string // RDMAP message: Send, SendInv, ReadResp, Write
	Off   int
	Len   int
	Desc  string
}

// goldenSources is the table the README in testdata/golden mirrors.
var goldenSources = []goldenSource{
	// nvme discover: admin queue 39094 -> 4420
	{"sqe-disc-connect.hex", 8, "Send", 0, 64, "discovery admin Connect SQE (QID 0, SQSIZE 31, KATO 0, keyed SGL 0x4F, 1024 B)"},
	{"connectdata-disc.hex", 10, "ReadResp", 0, 0, "discovery Connect data fetched by the target's RDMA Read"},
	{"cqe-disc-connect.hex", 11, "SendInv", 0, 0, "discovery Connect completion (CNTLID 1)"},
	{"sqe-disc-propget-cap.hex", 12, "Send", 0, 64, "Property Get CAP (8 bytes)"},
	{"cqe-disc-propget-cap.hex", 13, "Send", 0, 0, "Property Get CAP completion"},
	{"sqe-disc-propset-cc-en0.hex", 14, "Send", 0, 64, "Property Set CC = 0x00460060 (EN 0)"},
	{"sqe-disc-propset-cc-en1.hex", 20, "Send", 0, 64, "Property Set CC = 0x00460061 (EN 1)"},
	{"sqe-disc-propget-csts.hex", 22, "Send", 0, 64, "Property Get CSTS"},
	{"cqe-disc-propget-csts.hex", 23, "Send", 0, 0, "Property Get CSTS completion (RDY)"},
	{"sqe-disc-propget-vs.hex", 24, "Send", 0, 64, "Property Get VS"},
	{"cqe-disc-propget-vs.hex", 25, "Send", 0, 0, "Property Get VS completion (1.3.0)"},
	{"sqe-disc-identify-ctrl.hex", 26, "Send", 0, 64, "Identify Controller (CNS 1) on the discovery controller"},
	{"idctrl-disc.hex", 28, "Write", 0, 0, "nvmet discovery controller Identify Controller data"},
	{"sqe-disc-setfeat-aec.hex", 31, "Send", 0, 64, "Set Features Async Event Config = 0x80000000"},
	{"sqe-disc-aer.hex", 33, "Send", 0, 64, "Asynchronous Event Request (CID 31)"},
	{"sqe-disc-getlog-hdr.hex", 40, "Send", 0, 64, "Get Log Page 0x70, 1024 bytes, RAE"},
	{"disclog-hdr.hex", 41, "Write", 0, 0, "discovery log, first 1024 bytes (header)"},
	{"sqe-disc-getlog-full.hex", 44, "Send", 0, 64, "Get Log Page 0x70, 3072 bytes at LPO 0"},
	{"disclog.hex", 45, "Write", 0, 0, "discovery log: header and 2 entries"},
	{"sqe-disc-propset-cc-shn.hex", 48, "Send", 0, 64, "Property Set CC = 0x00464061 (SHN normal)"},
	{"cqe-disc-propget-csts-shst.hex", 51, "Send", 0, 0, "Property Get CSTS completion (SHST complete)"},
	// nvme connect: admin queue 40681 -> 4420
	{"sqe-connect-admin.hex", 62, "Send", 0, 64, "admin Connect SQE (QID 0, SQSIZE 31, KATO 5000)"},
	{"connectdata-admin.hex", 64, "ReadResp", 0, 0, "admin Connect data (CNTLID 0xFFFF)"},
	{"cqe-connect-admin.hex", 65, "SendInv", 0, 0, "admin Connect completion (CNTLID 1)"},
	{"sqe-identify-ctrl.hex", 80, "Send", 0, 64, "Identify Controller"},
	{"idctrl-nvm.hex", 82, "Write", 0, 0, "nvmet I/O controller Identify Controller data"},
	{"sqe-getlog-effects.hex", 85, "Send", 0, 64, "Get Log Page 0x05 (commands supported and effects)"},
	{"log-effects.hex", 87, "Write", 0, 0, "commands supported and effects log"},
	{"sqe-getlog-ana.hex", 90, "Send", 0, 64, "Get Log Page 0x0C (ANA), 8208 bytes"},
	{"log-ana.hex", 95, "Write", 0, 0, "ANA log (1 group, NSID 1, optimized) in an 8208-byte buffer"},
	{"sqe-getlog-smart.hex", 98, "Send", 0, 64, "Get Log Page 0x02 (SMART), NSID 0xFFFFFFFF"},
	{"log-smart.hex", 99, "Write", 0, 0, "SMART / health log"},
	{"sqe-setfeat-numqueues.hex", 102, "Send", 0, 64, "Set Features Number of Queues (1 queue)"},
	{"cqe-setfeat-numqueues.hex", 103, "Send", 0, 0, "Set Features Number of Queues completion (0x007F007F)"},
	{"sqe-setfeat-aec.hex", 113, "Send", 0, 64, "Set Features Async Event Config = 0x900"},
	{"cqe-setfeat-aec.hex", 114, "Send", 0, 0, "Set Features Async Event Config completion"},
	{"sqe-identify-cns6.hex", 116, "Send", 0, 64, "Identify CNS 6 (NVM command set controller)"},
	{"idctrl-nvmcs.hex", 119, "Write", 0, 0, "Identify CNS 6 data (all zeros from nvmet)"},
	{"sqe-identify-nslist.hex", 122, "Send", 0, 64, "Identify CNS 2 (active namespace list)"},
	{"nslist.hex", 124, "Write", 0, 0, "active namespace list (NSID 1)"},
	{"sqe-identify-nsdesc.hex", 127, "Send", 0, 64, "Identify CNS 3 for NSID 1"},
	{"nsdesc.hex", 129, "Write", 0, 0, "namespace identification descriptors (UUID, CSI)"},
	{"sqe-identify-ns.hex", 132, "Send", 0, 64, "Identify Namespace (CNS 0) NSID 1"},
	{"idns.hex", 134, "Write", 0, 0, "Identify Namespace data (1 GiB, 512-byte blocks)"},
	// I/O queue 38335 -> 4420
	{"sqe-connect-io.hex", 111, "Send", 0, 64, "I/O queue Connect SQE (QID 1, SQSIZE 127, in-capsule SGL 0x01)"},
	{"connectdata-io.hex", 111, "Send", 64, 0, "I/O queue Connect data, in-capsule (CNTLID 1)"},
	{"cqe-connect-io.hex", 112, "Send", 0, 0, "I/O queue Connect completion"},
	{"sqe-read-4k.hex", 142, "Send", 0, 64, "Read NSID 1 LBA 0, 8 blocks, keyed SGL 0x4F"},
	{"cqe-read.hex", 147, "SendInv", 0, 0, "Read completion (SQID 1)"},
	{"sqe-write-incapsule.hex", 167, "Send", 0, 64, "Write NSID 1 LBA 0, 8 blocks, 4096 bytes in-capsule"},
	{"cqe-write.hex", 168, "Send", 0, 0, "Write completion"},
	{"sqe-read-128k.hex", 182, "Send", 0, 64, "Read NSID 1 LBA 2048, 256 blocks (128 KiB)"},
	{"sqe-flush.hex", 242, "Send", 0, 64, "Flush NSID 1"},
}

// loadGolden returns the bytes of testdata/golden/name: hex digits,
// whitespace ignored, lines starting with # are comments.
func loadGolden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	var h strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		h.WriteString(strings.Join(strings.Fields(line), ""))
	}
	out, err := hex.DecodeString(h.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

func formatGolden(src goldenSource, data []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s frame %d (%s payload", captureName, src.Frame, src.Op)
	if src.Off != 0 || src.Len != 0 {
		fmt.Fprintf(&b, " bytes %d..%d", src.Off, src.Off+len(data))
	}
	fmt.Fprintf(&b, "): %s\n", src.Desc)
	for i := 0; i < len(data); i += 32 {
		b.WriteString(hex.EncodeToString(data[i:min(i+32, len(data))]))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func TestGoldenFromCapture(t *testing.T) {
	path := filepath.Join(captureDir, captureName)
	if _, err := os.Stat(path); err != nil {
		if *update {
			t.Fatalf("-update needs the capture: %v", err)
		}
		t.Skipf("lab capture %s not available (%v): golden files are checked against it only in the lab checkout", path, err)
	}
	msgs, err := readCaptureMessages(path)
	if err != nil {
		t.Fatal(err)
	}
	byFrame := map[int][]captureMessage{}
	for _, m := range msgs {
		byFrame[m.Frame] = append(byFrame[m.Frame], m)
	}
	for _, src := range goldenSources {
		ms := byFrame[src.Frame]
		if len(ms) != 1 || ms[0].Op != src.Op {
			t.Errorf("%s: frame %d holds %v, want one %s", src.File, src.Frame, ms, src.Op)
			continue
		}
		p := ms[0].Payload
		end := len(p)
		if src.Len != 0 {
			end = src.Off + src.Len
		}
		if end > len(p) {
			t.Errorf("%s: frame %d payload is %d bytes, want %d", src.File, src.Frame, len(p), end)
			continue
		}
		data := p[src.Off:end]
		file := filepath.Join("testdata", "golden", src.File)
		if *update {
			if err := os.WriteFile(file, formatGolden(src, data), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got := loadGolden(t, src.File); !bytes.Equal(got, data) {
			t.Errorf("%s differs from %s frame %d", src.File, captureName, src.Frame)
		}
	}
}

// captureMessage is one DDP/RDMAP message of the capture (each message in
// these captures is a single FPDU: MTU 65536, no segmentation).
type captureMessage struct {
	Frame   int // pcap frame (1-based) holding the message's last byte
	SrcPort uint16
	DstPort uint16
	Op      string
	Payload []byte
	Tagged  bool
	Last    bool
}

func (m captureMessage) String() string {
	return fmt.Sprintf("%s %d>%d (%d bytes)", m.Op, m.SrcPort, m.DstPort, len(m.Payload))
}

var rdmapOps = map[uint8]string{0: "Write", 1: "ReadReq", 2: "ReadResp", 3: "Send", 4: "SendInv", 5: "SendSE", 6: "SendSEInv", 7: "Terminate"}

// readCaptureMessages reassembles the TCP streams of an Ethernet/IPv4 pcap
// and splits them into MPA FPDUs (no markers; CRC field present): after the
// MPA request/reply frame, each FPDU is a 2-byte big-endian ULPDU length, the
// ULPDU (DDP header 14 bytes tagged or 18 untagged, then payload), padding
// to 4 bytes, and a 4-byte CRC (protocol.md §3, §4).
func readCaptureMessages(path string) ([]captureMessage, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(raw) < 24 || binary.LittleEndian.Uint32(raw) != 0xa1b2c3d4 {
		return nil, fmt.Errorf("%s: not a little-endian microsecond pcap", path)
	}
	type stream struct {
		next   uint32
		synced bool
		buf    []byte
		ends   []int // ends[i]: stream length after frame frames[i]
		frames []int
	}
	streams := map[[2]uint16]*stream{}
	var order [][2]uint16
	p := raw[24:]
	for frame := 1; len(p) >= 16; frame++ {
		incl := int(binary.LittleEndian.Uint32(p[8:]))
		if len(p) < 16+incl {
			return nil, fmt.Errorf("frame %d truncated", frame)
		}
		pkt := p[16 : 16+incl]
		p = p[16+incl:]
		if len(pkt) < 14+20 || binary.BigEndian.Uint16(pkt[12:]) != 0x0800 {
			continue
		}
		ip := pkt[14:]
		ihl := int(ip[0]&0xF) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if ip[9] != 6 || tot > len(ip) || ihl+20 > tot {
			continue
		}
		tcp := ip[ihl:tot]
		key := [2]uint16{binary.BigEndian.Uint16(tcp[0:]), binary.BigEndian.Uint16(tcp[2:])}
		seq := binary.BigEndian.Uint32(tcp[4:])
		doff := int(tcp[12]>>4) * 4
		flags := tcp[13]
		s := streams[key]
		if s == nil {
			s = &stream{}
			streams[key] = s
			order = append(order, key)
		}
		if flags&0x02 != 0 { // SYN
			s.next, s.synced = seq+1, true
			continue
		}
		data := tcp[doff:]
		if len(data) == 0 || !s.synced {
			continue
		}
		if d := int32(seq - s.next); d > 0 {
			return nil, fmt.Errorf("frame %d: gap of %d bytes in stream %v", frame, d, key)
		} else if d < 0 { // retransmission, maybe partial
			if -int(d) >= len(data) {
				continue
			}
			data = data[-d:]
		}
		s.buf = append(s.buf, data...)
		s.next += uint32(len(data))
		s.ends = append(s.ends, len(s.buf))
		s.frames = append(s.frames, frame)
	}
	var msgs []captureMessage
	for _, key := range order {
		s := streams[key]
		b := s.buf
		frameAt := func(end int) int {
			for i, e := range s.ends {
				if e >= end {
					return s.frames[i]
				}
			}
			return -1
		}
		if len(b) < 20 {
			continue
		}
		pos := 20 + int(binary.BigEndian.Uint16(b[18:])) // MPA request/reply frame
		for pos+2 <= len(b) {
			ulen := int(binary.BigEndian.Uint16(b[pos:]))
			end := pos + 2 + ulen + (4-(2+ulen)%4)%4 + 4
			if end > len(b) || ulen < 2 {
				return nil, fmt.Errorf("stream %v: truncated FPDU at %d", key, pos)
			}
			u := b[pos+2 : pos+2+ulen]
			m := captureMessage{Frame: frameAt(end), SrcPort: key[0], DstPort: key[1],
				Tagged: u[0]&0x80 != 0, Last: u[0]&0x40 != 0, Op: rdmapOps[u[1]&0xF]}
			hdr := 18
			if m.Tagged {
				hdr = 14
			}
			if ulen < hdr {
				return nil, fmt.Errorf("stream %v: short DDP header at %d", key, pos)
			}
			m.Payload = u[hdr:]
			msgs = append(msgs, m)
			pos = end
		}
	}
	return msgs, nil
}
